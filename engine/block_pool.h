// The metadata of the paged KV cache's physical blocks: which are free, and how many holders each
// used block has. Memory lives in KvCache; a block here is only an id and a reference count.
//
// Allocation is all-or-nothing: a request that cannot be met fully changes nothing.
// Thread-safety: thread-safe (one internal mutex).
#ifndef BATON_ENGINE_BLOCK_POOL_H_
#define BATON_ENGINE_BLOCK_POOL_H_

#include <cstdint>
#include <span>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace baton::engine {

using BlockId = int32_t;

class BlockPool {
 public:
  explicit BlockPool(int32_t n_blocks);
  BlockPool(const BlockPool&) = delete;
  BlockPool& operator=(const BlockPool&) = delete;

  int32_t n_blocks() const { return n_blocks_; }
  int32_t n_free() const;

  // n blocks, each with reference count 1; RESOURCE_EXHAUSTED (saying how many are free) when
  // fewer than n are free, and then nothing changes.
  absl::StatusOr<std::vector<BlockId>> Allocate(int32_t n);

  // Adds a holder to a used block (prefix sharing). Programmer error for a free or unknown block.
  void Retain(BlockId id);

  // Drops one holder of each block; a block whose count reaches 0 becomes free.
  // Programmer error for a free or unknown block.
  void Release(std::span<const BlockId> ids);

  int32_t RefCount(BlockId id) const;

 private:
  const int32_t n_blocks_;
  mutable absl::Mutex mu_;
  std::vector<BlockId> free_ ABSL_GUARDED_BY(mu_);        // LIFO stack of free ids
  std::vector<int32_t> ref_counts_ ABSL_GUARDED_BY(mu_);  // [n_blocks]
};

}  // namespace baton::engine

#endif  // BATON_ENGINE_BLOCK_POOL_H_
