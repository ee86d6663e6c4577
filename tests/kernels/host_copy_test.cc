// MergeContiguous: the copies of a KV hand-off made as few as their addresses allow.
#include "kernels/host_copy.h"

#include <cstdint>
#include <vector>

#include "gtest/gtest.h"

namespace baton::kernels {
namespace {

bool Same(const HostCopy& a, const HostCopy& b) {
  return a.destination == b.destination && a.source == b.source && a.bytes == b.bytes;
}

TEST(MergeContiguousTest, CopiesThatContinueOneAnotherOnBothSidesBecomeOne) {
  std::vector<uint8_t> device(1000), host(1000);
  uint8_t* d = device.data();
  uint8_t* h = host.data();
  const std::vector<HostCopy> copies = {
      {h, d, 100},              // 0..100
      {h + 100, d + 100, 50},   // continues both: merged
      {h + 150, d + 400, 50},   // the source jumps: a new copy
      {h + 200, d + 450, 10},   // continues: merged
      {h + 300, d + 460, 10},   // the destination jumps: a new copy
      {h + 310, d + 470, 0},    // empty, continues: merged (no change)
  };
  const std::vector<HostCopy> merged = MergeContiguous(copies);
  ASSERT_EQ(merged.size(), 3u);
  EXPECT_TRUE(Same(merged[0], {h, d, 150}));
  EXPECT_TRUE(Same(merged[1], {h + 150, d + 400, 60}));
  EXPECT_TRUE(Same(merged[2], {h + 300, d + 460, 10}));
}

TEST(MergeContiguousTest, BlocksInReverseOrderStaySeparate) {
  std::vector<uint8_t> device(300), host(300);
  const std::vector<HostCopy> copies = {{host.data(), device.data() + 200, 100},
                                        {host.data() + 100, device.data() + 100, 100},
                                        {host.data() + 200, device.data(), 100}};
  const std::vector<HostCopy> merged = MergeContiguous(copies);
  ASSERT_EQ(merged.size(), 3u);
  for (size_t i = 0; i < 3; ++i) EXPECT_TRUE(Same(merged[i], copies[i])) << i;
  EXPECT_TRUE(MergeContiguous({}).empty());
}

}  // namespace
}  // namespace baton::kernels
