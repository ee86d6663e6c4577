// The metadata of the paged KV cache's physical blocks: which are free, how many holders each
// used block has, and which hold cached prefixes. Memory lives in KvCache; a block here is only an
// id, a reference count and perhaps a content hash.
//
// Prefix caching (vLLM's): a used block whose tokens are final may be published under its content
// hash (engine/block_hash.h). A published block stays findable by that hash after its last holder
// releases it: it is then cached — free for allocation but kept — until allocation needs it, which
// takes never-published free blocks first and then evicts cached ones least recently released
// first. MatchPrefix() takes a holder on each block of the longest run of hashes found, so a
// block in use is never evicted. Release() returns a sequence's blocks last to first, so that a
// chain's tail is evicted before its head (a prefix is useless without its beginning).
//
// Allocation is all-or-nothing: a request that cannot be met fully changes nothing.
// Thread-safety: thread-safe (one internal mutex).
#ifndef BATON_ENGINE_BLOCK_POOL_H_
#define BATON_ENGINE_BLOCK_POOL_H_

#include <cstdint>
#include <functional>
#include <list>
#include <span>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
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
  // Blocks allocation can take now: never-published free blocks and cached blocks nobody holds.
  int32_t n_free() const;
  // Published blocks (held or not).
  int32_t n_cached() const;
  // Cached blocks evicted by allocation so far.
  int64_t n_evicted() const;
  // Called (outside the pool's lock) with the number of cached blocks an allocation evicted, when
  // it evicted any. Set before the pool is shared between threads.
  void set_eviction_observer(std::function<void(int32_t)> observer) {
    eviction_observer_ = std::move(observer);
  }

  // n blocks, each with reference count 1; RESOURCE_EXHAUSTED (saying how many are free) when
  // fewer than n are free, and then nothing changes.
  absl::StatusOr<std::vector<BlockId>> Allocate(int32_t n);

  // Adds a holder to a used block (prefix sharing). Programmer error for a free or unknown block.
  void Retain(BlockId id);

  // Drops one holder of each block, last to first; a block whose count reaches 0 becomes free
  // (cached, when it is published). Programmer error for a free or unknown block.
  void Release(std::span<const BlockId> ids);

  int32_t RefCount(BlockId id) const;

  // The blocks published under hashes[0], hashes[1], ... while each is found, one holder added to
  // each (the caller releases them like allocated blocks).
  std::vector<BlockId> MatchPrefix(std::span<const uint64_t> hashes);

  // Publishes used block `id` under `hash`. No change when the block is published already or
  // another block holds that hash (the same tokens computed twice: the other one stays the
  // cached copy). Programmer error for a free block, or one published under another hash.
  void Publish(BlockId id, uint64_t hash);

  // Up to `max_count` hashes of published blocks: those in use first, then cached ones from the
  // most recently released. What a worker advertises to the router.
  std::vector<uint64_t> PublishedHashes(int32_t max_count) const;

 private:
  // Takes one block for allocation, evicting a cached one when no other is free.
  BlockId TakeFreeLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const int32_t n_blocks_;
  mutable absl::Mutex mu_;
  std::vector<BlockId> free_ ABSL_GUARDED_BY(mu_);        // LIFO stack of never-published free ids
  std::vector<int32_t> ref_counts_ ABSL_GUARDED_BY(mu_);  // [n_blocks]
  // Cached blocks (published, count 0), least recently released first, and where each sits.
  std::list<BlockId> evictable_ ABSL_GUARDED_BY(mu_);
  std::vector<std::list<BlockId>::iterator> evictable_at_ ABSL_GUARDED_BY(mu_);  // [n_blocks]
  std::vector<uint64_t> hash_of_ ABSL_GUARDED_BY(mu_);     // [n_blocks], valid where published
  std::vector<bool> published_ ABSL_GUARDED_BY(mu_);       // [n_blocks]
  absl::flat_hash_map<uint64_t, BlockId> by_hash_ ABSL_GUARDED_BY(mu_);
  int64_t n_evicted_ ABSL_GUARDED_BY(mu_) = 0;
  std::function<void(int32_t)> eviction_observer_;
};

}  // namespace baton::engine

#endif  // BATON_ENGINE_BLOCK_POOL_H_
