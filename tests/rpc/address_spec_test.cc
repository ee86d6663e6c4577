// The spec of the routers a worker reports to: a static list, or a DNS name's addresses.
#include "worker/router_links.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace baton::worker {
namespace {

using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(ResolveRoutersTest, AListNamesEachRouterOnce) {
  absl::StatusOr<std::vector<std::string>> r =
      ResolveRouters("10.0.0.1:7000, router-b:7001,10.0.0.1:7000");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_THAT(*r, ElementsAre("10.0.0.1:7000", "router-b:7001"));
}

TEST(ResolveRoutersTest, ADnsNameGivesEveryAddressItResolvesTo) {
  absl::StatusOr<std::vector<std::string>> r = ResolveRouters("dns:localhost:7000");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_THAT(*r, Contains("127.0.0.1:7000"));
  r = ResolveRouters("dns:127.0.0.1:7001");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_THAT(*r, ElementsAre("127.0.0.1:7001"));
}

TEST(ResolveRoutersTest, MalformedSpecsAreNamed) {
  for (const char* spec :
       {"router", "router:", "router:0", ":7000", "a:7000,b", ",", "dns:x", "dns:x:99999"}) {
    absl::StatusOr<std::vector<std::string>> r = ResolveRouters(spec);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << spec;
    EXPECT_THAT(r.status().message(), HasSubstr(absl::StrCat("--router '", spec, "'"))) << spec;
  }
  absl::StatusOr<std::vector<std::string>> r = ResolveRouters("dns:no-such-host.invalid:7000");
  EXPECT_EQ(r.status().code(), absl::StatusCode::kUnavailable) << r.status();
  EXPECT_THAT(r.status().message(), HasSubstr("no-such-host.invalid does not resolve"));
}

}  // namespace
}  // namespace baton::worker
