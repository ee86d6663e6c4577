#include "engine/block_pool.h"

#include "absl/log/check.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace baton::engine {

BlockPool::BlockPool(int32_t n_blocks) : n_blocks_(n_blocks), ref_counts_(n_blocks, 0) {
  CHECK_GE(n_blocks, 0);
  free_.reserve(n_blocks);
  // Highest id at the bottom of the stack so that allocation hands out 0, 1, 2, ... first.
  for (BlockId id = n_blocks - 1; id >= 0; --id) free_.push_back(id);
}

int32_t BlockPool::n_free() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int32_t>(free_.size());
}

absl::StatusOr<std::vector<BlockId>> BlockPool::Allocate(int32_t n) {
  CHECK_GE(n, 0);
  absl::MutexLock lock(&mu_);
  if (static_cast<size_t>(n) > free_.size()) {
    return absl::ResourceExhaustedError(absl::StrCat("KV cache full: need ", n, " blocks, ",
                                                     free_.size(), " of ", n_blocks_, " free"));
  }
  std::vector<BlockId> ids(free_.end() - n, free_.end());
  free_.resize(free_.size() - n);
  for (BlockId id : ids) ref_counts_[id] = 1;
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
  for (BlockId id : ids) {
    CHECK(id >= 0 && id < n_blocks_) << "block " << id << " out of range";
    CHECK_GT(ref_counts_[id], 0) << "release of free block " << id;
    if (--ref_counts_[id] == 0) free_.push_back(id);
  }
}

int32_t BlockPool::RefCount(BlockId id) const {
  absl::MutexLock lock(&mu_);
  CHECK(id >= 0 && id < n_blocks_);
  return ref_counts_[id];
}

}  // namespace baton::engine
