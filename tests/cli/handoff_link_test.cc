// `baton bench handoff --link-sweep` parsing, and where --link places the benchmark's processes.
#include "cli/handoff_link.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace baton::cli {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(HandoffLinkTest, SweepIsCommaSeparatedRates) {
  absl::StatusOr<std::vector<std::string>> links = ParseLinkSweep("1gbit,10gbit,100gbit");
  ASSERT_TRUE(links.ok()) << links.status();
  EXPECT_THAT(*links, ElementsAre("1gbit", "10gbit", "100gbit"));
}

TEST(HandoffLinkTest, BadSweepEntriesAreNamed) {
  for (const char* text : {"1gbit,,10gbit", "fast", "1gbit,10gbps", ""}) {
    absl::StatusOr<std::vector<std::string>> links = ParseLinkSweep(text);
    EXPECT_EQ(links.status().code(), absl::StatusCode::kInvalidArgument) << text;
    EXPECT_THAT(links.status().message(), HasSubstr("--link-sweep")) << text;
  }
}

TEST(HandoffLinkTest, DefaultPlacementIsLoopback) {
  const bench::HandoffBenchOptions options;
  for (const bench::ProcessPlacement* p :
       {&options.router_placement, &options.prefill_placement, &options.decode_placement}) {
    EXPECT_TRUE(p->prefix.empty());
    EXPECT_THAT(p->listen, ElementsAre("--host", "127.0.0.1", "--port", "0"));
  }
  EXPECT_EQ(options.link, "loopback");
}

}  // namespace
}  // namespace baton::cli
