#include "engine/block_pool.h"

#include <algorithm>

#include "absl/log/check.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace baton::engine {

BlockPool::BlockPool(int32_t n_blocks)
    : n_blocks_(n_blocks),
      ref_counts_(n_blocks, 0),
      evictable_at_(n_blocks),
      hash_of_(n_blocks, 0),
      published_(n_blocks, false) {
  CHECK_GE(n_blocks, 0);
  free_.reserve(n_blocks);
  // Highest id at the bottom of the stack so that allocation hands out 0, 1, 2, ... first.
  for (BlockId id = n_blocks - 1; id >= 0; --id) free_.push_back(id);
}

int32_t BlockPool::n_free() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int32_t>(free_.size() + evictable_.size());
}

int32_t BlockPool::n_cached() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int32_t>(by_hash_.size());
}

int64_t BlockPool::n_evicted() const {
  absl::MutexLock lock(&mu_);
  return n_evicted_;
}

BlockId BlockPool::TakeFreeLocked() {
  if (!free_.empty()) {
    const BlockId id = free_.back();
    free_.pop_back();
    return id;
  }
  const BlockId id = evictable_.front();
  evictable_.pop_front();
  by_hash_.erase(hash_of_[id]);
  published_[id] = false;
  ++n_evicted_;
  return id;
}

absl::StatusOr<std::vector<BlockId>> BlockPool::Allocate(int32_t n) {
  CHECK_GE(n, 0);
  std::vector<BlockId> ids(n);
  int64_t evicted = 0;
  {
    absl::MutexLock lock(&mu_);
    const size_t n_free = free_.size() + evictable_.size();
    if (static_cast<size_t>(n) > n_free) {
      return absl::ResourceExhaustedError(absl::StrCat("KV cache full: need ", n, " blocks, ",
                                                       n_free, " of ", n_blocks_, " free"));
    }
    const int64_t evicted_before = n_evicted_;
    for (BlockId& id : ids) {
      id = TakeFreeLocked();
      ref_counts_[id] = 1;
    }
    evicted = n_evicted_ - evicted_before;
  }
  if (evicted > 0 && eviction_observer_) eviction_observer_(static_cast<int32_t>(evicted));
  return ids;
}

void BlockPool::Retain(BlockId id) {
  absl::MutexLock lock(&mu_);
  CHECK(id >= 0 && id < n_blocks_) << "block " << id << " out of range";
  CHECK_GT(ref_counts_[id], 0) << "retain of free block " << id;
  ++ref_counts_[id];
}

void BlockPool::Release(std::span<const BlockId> ids) {
  absl::MutexLock lock(&mu_);
  for (auto it = ids.rbegin(); it != ids.rend(); ++it) {
    const BlockId id = *it;
    CHECK(id >= 0 && id < n_blocks_) << "block " << id << " out of range";
    CHECK_GT(ref_counts_[id], 0) << "release of free block " << id;
    if (--ref_counts_[id] > 0) continue;
    if (published_[id]) {
      evictable_at_[id] = evictable_.insert(evictable_.end(), id);
    } else {
      free_.push_back(id);
    }
  }
}

int32_t BlockPool::RefCount(BlockId id) const {
  absl::MutexLock lock(&mu_);
  CHECK(id >= 0 && id < n_blocks_);
  return ref_counts_[id];
}

std::vector<BlockId> BlockPool::MatchPrefix(std::span<const uint64_t> hashes) {
  absl::MutexLock lock(&mu_);
  std::vector<BlockId> matched;
  for (const uint64_t hash : hashes) {
    auto found = by_hash_.find(hash);
    if (found == by_hash_.end()) break;
    const BlockId id = found->second;
    if (ref_counts_[id] == 0) evictable_.erase(evictable_at_[id]);
    ++ref_counts_[id];
    matched.push_back(id);
  }
  return matched;
}

void BlockPool::Publish(BlockId id, uint64_t hash) {
  absl::MutexLock lock(&mu_);
  CHECK(id >= 0 && id < n_blocks_) << "block " << id << " out of range";
  CHECK_GT(ref_counts_[id], 0) << "publish of free block " << id;
  if (published_[id]) {
    CHECK_EQ(hash_of_[id], hash) << "block " << id << " published under two hashes";
    return;
  }
  if (!by_hash_.emplace(hash, id).second) return;
  hash_of_[id] = hash;
  published_[id] = true;
}

std::vector<uint64_t> BlockPool::PublishedHashes(int32_t max_count) const {
  absl::MutexLock lock(&mu_);
  const size_t limit = static_cast<size_t>(std::max(0, max_count));
  std::vector<uint64_t> hashes;
  hashes.reserve(std::min(limit, by_hash_.size()));
  for (const auto& [hash, id] : by_hash_) {
    if (hashes.size() == limit) return hashes;
    if (ref_counts_[id] > 0) hashes.push_back(hash);
  }
  for (auto it = evictable_.rbegin(); it != evictable_.rend() && hashes.size() < limit; ++it) {
    hashes.push_back(hash_of_[*it]);
  }
  return hashes;
}

}  // namespace baton::engine
