#include "cli/link_spec.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "cli/cluster_config.h"
#include "gtest/gtest.h"

namespace baton::cli {
namespace {

TEST(LinkSpecTest, ParsesRateAndDelay) {
  absl::StatusOr<LinkSpec> spec = ParseLinkSpec("10gbit,200us", "--link");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(*spec->rate_bits_per_second, 10'000'000'000);
  EXPECT_EQ(spec->one_way_delay, absl::Microseconds(200));
  spec = ParseLinkSpec("1.5Gbit", "--link");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(*spec->rate_bits_per_second, 1'500'000'000);
  EXPECT_EQ(spec->one_way_delay, absl::ZeroDuration());
  spec = ParseLinkSpec("none,2ms", "--link");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_FALSE(spec->rate_bits_per_second.has_value());
  EXPECT_EQ(spec->one_way_delay, absl::Milliseconds(2));
}

TEST(LinkSpecTest, MalformedNamesWhereAndWhat) {
  for (const auto& [text, part] : std::vector<std::pair<std::string, std::string>>{
           {"10gbps", "bandwidth '10gbps'"}, {"0gbit", "bandwidth '0gbit'"},
           {"10gbit,5", "delay '5'"}, {"10gbit,11s", "delay '11s'"}, {"", "''"},
           {"1gbit,1ms,3", "RATE[,DELAY]"}}) {
    absl::StatusOr<LinkSpec> spec = ParseLinkSpec(text, "--link");
    ASSERT_FALSE(spec.ok()) << text;
    EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_TRUE(absl::StrContains(spec.status().message(), "--link")) << spec.status();
    EXPECT_TRUE(absl::StrContains(spec.status().message(), part)) << spec.status();
  }
}

TEST(LinkSpecTest, ClusterFileLinkKey) {
  absl::StatusOr<ClusterConfig> c = ParseClusterConfig(
      "link: 25gbit,100us\nprefill: [{}]\ndecode: [{}]\n", "cluster.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->link, "25gbit,100us");
  c = ParseClusterConfig("prefill: [{}]\ndecode: [{}]\nlink: fast\n", "cluster.yaml");
  ASSERT_FALSE(c.ok());
  EXPECT_TRUE(absl::StrContains(c.status().message(), "cluster.yaml:3: link: bandwidth 'fast'"))
      << c.status();
}

}  // namespace
}  // namespace baton::cli
