// Address specs: a static list, or a DNS name's addresses.
#include "rpc/address_spec.h"

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace baton::rpc {
namespace {

using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(AddressSpecTest, AListNamesEachAddressOnce) {
  absl::StatusOr<std::vector<std::string>> r =
      ResolveAddressSpec("--router", "10.0.0.1:7000, router-b:7001,10.0.0.1:7000");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_THAT(*r, ElementsAre("10.0.0.1:7000", "router-b:7001"));
}

TEST(AddressSpecTest, ADnsNameGivesEveryAddressItResolvesTo) {
  absl::StatusOr<std::vector<std::string>> r = ResolveAddressSpec("--router", "dns:localhost:7000");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_THAT(*r, Contains("127.0.0.1:7000"));
  r = ResolveAddressSpec("--router", "dns:127.0.0.1:7001");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_THAT(*r, ElementsAre("127.0.0.1:7001"));
}

TEST(AddressSpecTest, MalformedSpecsAreNamed) {
  for (const char* spec :
       {"router", "router:", "router:0", ":7000", "a:7000,b", ",", "dns:x", "dns:x:99999"}) {
    absl::StatusOr<std::vector<std::string>> r = ResolveAddressSpec("--router", spec);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << spec;
    EXPECT_THAT(r.status().message(), HasSubstr(absl::StrCat("--router '", spec, "'"))) << spec;
  }
  EXPECT_THAT(ParseAddressSpec("--decode", "a:1,b").status().message(),
              HasSubstr("--decode 'a:1,b': 'b' is not HOST:PORT"));
  absl::StatusOr<std::vector<std::string>> r =
      ResolveAddressSpec("--router", "dns:no-such-host.invalid:7000");
  EXPECT_EQ(r.status().code(), absl::StatusCode::kUnavailable) << r.status();
  EXPECT_THAT(r.status().message(), HasSubstr("no-such-host.invalid does not resolve"));
}

TEST(AddressSpecTest, ParsingResolvesNothing) {
  absl::StatusOr<AddressSpec> spec = ParseAddressSpec("--prefill", "dns:no-such-host.invalid:7100");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_TRUE(spec->is_dns());
  EXPECT_EQ(spec->dns_name, "no-such-host.invalid");
  EXPECT_EQ(spec->dns_port, 7100);
  spec = ParseAddressSpec("--prefill", "a:1,b:2");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_FALSE(spec->is_dns());
  EXPECT_THAT(spec->list, ElementsAre("a:1", "b:2"));
}

}  // namespace
}  // namespace baton::rpc
