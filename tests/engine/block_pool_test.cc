#include "engine/block_pool.h"

#include <algorithm>
#include <set>

#include "absl/status/status.h"
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

// Prefix caching.

std::vector<BlockId> AllocateOrDie(BlockPool& pool, int32_t n) {
  absl::StatusOr<std::vector<BlockId>> ids = pool.Allocate(n);
  EXPECT_TRUE(ids.ok()) << ids.status();
  return ids.ok() ? *ids : std::vector<BlockId>();
}

TEST(BlockPoolCacheTest, APublishedBlockOutlivesItsHoldersUntilEvicted) {
  BlockPool pool(4);
  const std::vector<BlockId> a = AllocateOrDie(pool, 2);
  pool.Publish(a[0], 100);
  pool.Publish(a[1], 101);
  EXPECT_EQ(pool.n_cached(), 2);
  pool.Release(a);
  EXPECT_EQ(pool.n_free(), 4);  // cached blocks nobody holds count as free
  EXPECT_EQ(pool.n_cached(), 2);
  const uint64_t chain[] = {100, 101, 102};
  const std::vector<BlockId> matched = pool.MatchPrefix(chain);
  EXPECT_EQ(matched, a);
  EXPECT_EQ(pool.RefCount(a[0]), 1);
  EXPECT_EQ(pool.n_free(), 2);
  pool.Release(matched);
}

TEST(BlockPoolCacheTest, MatchStopsAtTheFirstMissingHash) {
  BlockPool pool(4);
  const std::vector<BlockId> a = AllocateOrDie(pool, 3);
  pool.Publish(a[0], 1);
  pool.Publish(a[2], 3);  // block 1 unpublished: the chain breaks there
  const uint64_t chain[] = {1, 2, 3};
  const std::vector<BlockId> matched = pool.MatchPrefix(chain);
  EXPECT_EQ(matched, std::vector<BlockId>{a[0]});
  EXPECT_EQ(pool.RefCount(a[0]), 2);
  pool.Release(matched);
  pool.Release(a);
}

TEST(BlockPoolCacheTest, EvictionUnderPressureNeverTakesABlockInUse) {
  BlockPool pool(6);
  const std::vector<BlockId> held = AllocateOrDie(pool, 3);
  for (int i = 0; i < 3; ++i) pool.Publish(held[i], 10 + i);
  const std::vector<BlockId> dropped = AllocateOrDie(pool, 3);
  for (int i = 0; i < 3; ++i) pool.Publish(dropped[i], 20 + i);
  pool.Release(dropped);  // cached, evictable
  const uint64_t held_chain[] = {10, 11, 12};
  const std::vector<BlockId> shared = pool.MatchPrefix(held_chain);  // a second holder
  EXPECT_EQ(shared, held);
  pool.Release(held);  // the first holder leaves; `shared` still holds them

  int32_t evicted_seen = 0;
  pool.set_eviction_observer([&](int32_t n) { evicted_seen += n; });
  // Everything free is the 3 dropped blocks: taking them evicts them, never a held one.
  const std::vector<BlockId> fresh = AllocateOrDie(pool, 3);
  for (BlockId id : fresh) {
    EXPECT_TRUE(std::find(held.begin(), held.end(), id) == held.end()) << "evicted block " << id;
  }
  EXPECT_EQ(pool.n_evicted(), 3);
  EXPECT_EQ(evicted_seen, 3);
  EXPECT_EQ(pool.Allocate(1).status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(pool.MatchPrefix(held_chain), held);  // still cached, a third holder
  const uint64_t dropped_chain[] = {20};
  EXPECT_TRUE(pool.MatchPrefix(dropped_chain).empty());
  pool.Release(held);
  pool.Release(shared);
  pool.Release(fresh);
  EXPECT_EQ(pool.n_free(), 6);
}

TEST(BlockPoolCacheTest, NeverPublishedBlocksGoFirstThenTheLeastRecentlyReleased) {
  BlockPool pool(4);
  const std::vector<BlockId> older = AllocateOrDie(pool, 1);
  const std::vector<BlockId> newer = AllocateOrDie(pool, 1);
  pool.Publish(older[0], 1);
  pool.Publish(newer[0], 2);
  pool.Release(older);
  pool.Release(newer);
  // Two never-published blocks are free: they go before any cached one.
  const std::vector<BlockId> plain = AllocateOrDie(pool, 2);
  EXPECT_EQ(pool.n_evicted(), 0);
  const std::vector<BlockId> one = AllocateOrDie(pool, 1);
  EXPECT_EQ(one, older);  // released first, evicted first
  const uint64_t newer_chain[] = {2};
  EXPECT_EQ(pool.MatchPrefix(newer_chain), newer);
  const uint64_t older_chain[] = {1};
  EXPECT_TRUE(pool.MatchPrefix(older_chain).empty());
}

TEST(BlockPoolCacheTest, ASequencesTailIsEvictedBeforeItsHead) {
  BlockPool pool(3);
  const std::vector<BlockId> seq = AllocateOrDie(pool, 3);
  for (int i = 0; i < 3; ++i) pool.Publish(seq[i], 30 + i);
  pool.Release(seq);  // last to first
  const std::vector<BlockId> one = AllocateOrDie(pool, 1);
  EXPECT_EQ(one[0], seq[2]);
  const uint64_t chain[] = {30, 31, 32};
  EXPECT_EQ(pool.MatchPrefix(chain).size(), 2u);  // the head survives
}

TEST(BlockPoolCacheTest, TheSameContentTwiceKeepsTheFirstCopy) {
  BlockPool pool(2);
  const std::vector<BlockId> a = AllocateOrDie(pool, 2);
  pool.Publish(a[0], 7);
  pool.Publish(a[1], 7);  // computed twice: not published
  pool.Publish(a[0], 7);  // again: no change
  EXPECT_EQ(pool.n_cached(), 1);
  pool.Release(a);
  EXPECT_EQ(AllocateOrDie(pool, 1)[0], a[1]);  // the unpublished copy is plain free
  EXPECT_EQ(pool.n_evicted(), 0);
}

TEST(BlockPoolCacheTest, PublishedHashesListHeldBlocksFirstAndRespectTheLimit) {
  BlockPool pool(4);
  const std::vector<BlockId> held = AllocateOrDie(pool, 1);
  const std::vector<BlockId> cached = AllocateOrDie(pool, 2);
  pool.Publish(held[0], 1);
  pool.Publish(cached[0], 2);
  pool.Publish(cached[1], 3);
  pool.Release(cached);  // released 3 then 2: 2 is the most recent
  EXPECT_EQ(pool.PublishedHashes(2), (std::vector<uint64_t>{1, 2}));
  EXPECT_EQ(pool.PublishedHashes(10).size(), 3u);
  EXPECT_TRUE(pool.PublishedHashes(0).empty());
}

TEST(BlockPoolCacheDeathTest, PublishingAFreeBlockIsAProgrammerError) {
  BlockPool pool(2);
  EXPECT_DEATH(pool.Publish(0, 1), "publish of free block");
}

}  // namespace
}  // namespace baton::engine
