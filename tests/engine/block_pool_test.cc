#include "engine/block_pool.h"

#include <algorithm>
#include <set>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace baton::engine {
namespace {

TEST(BlockPoolTest, AllocatesDistinctBlocksUntilFull) {
  BlockPool pool(8);
  EXPECT_EQ(pool.n_free(), 8);
  absl::StatusOr<std::vector<BlockId>> a = pool.Allocate(5);
  ASSERT_TRUE(a.ok());
  absl::StatusOr<std::vector<BlockId>> b = pool.Allocate(3);
  ASSERT_TRUE(b.ok());
  std::set<BlockId> all(a->begin(), a->end());
  all.insert(b->begin(), b->end());
  EXPECT_EQ(all.size(), 8u);
  EXPECT_EQ(*all.begin(), 0);
  EXPECT_EQ(*all.rbegin(), 7);
  EXPECT_EQ(pool.n_free(), 0);
}

TEST(BlockPoolTest, FailedAllocationChangesNothing) {
  BlockPool pool(4);
  ASSERT_TRUE(pool.Allocate(3).ok());
  absl::StatusOr<std::vector<BlockId>> too_many = pool.Allocate(2);
  EXPECT_EQ(too_many.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(too_many.status().message()), testing::HasSubstr("1 of 4 free"));
  EXPECT_EQ(pool.n_free(), 1);
  EXPECT_TRUE(pool.Allocate(1).ok());
}

TEST(BlockPoolTest, ReferenceCountsFreeAtZero) {
  BlockPool pool(2);
  absl::StatusOr<std::vector<BlockId>> allocated = pool.Allocate(1);
  ASSERT_TRUE(allocated.ok()) << allocated.status();
  const std::vector<BlockId> ids = *allocated;
  pool.Retain(ids[0]);
  EXPECT_EQ(pool.RefCount(ids[0]), 2);
  pool.Release(ids);
  EXPECT_EQ(pool.n_free(), 1);
  pool.Release(ids);
  EXPECT_EQ(pool.n_free(), 2);
  EXPECT_EQ(pool.RefCount(ids[0]), 0);
}

TEST(BlockPoolDeathTest, DoubleReleaseIsAProgrammerError) {
  BlockPool pool(2);
  absl::StatusOr<std::vector<BlockId>> allocated = pool.Allocate(1);
  ASSERT_TRUE(allocated.ok()) << allocated.status();
  const std::vector<BlockId> ids = *allocated;
  pool.Release(ids);
  EXPECT_DEATH(pool.Release(ids), "release of free block");
}

}  // namespace
}  // namespace baton::engine
