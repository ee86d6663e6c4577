// A tensor-parallel group's KV cache seen as the whole model's: the KV hand-off sends and
// receives whole-model blocks, and each rank's cache holds its KV heads of the same block ids
// (engine/tensor_parallel_group.h). A layer's block is [planes][n_kv_head][block_size][head_dim]
// f16 (kernels/kv_block_layout.h: head-major), so a rank's heads are one contiguous run of each
// plane on both sides: assembling a block copies one run per rank and plane, scattering one run
// per rank and plane into every rank that holds those heads (replicated heads into each).
//
// Thread-safety: Assemble and Scatter of different blocks may run at once; the byte counters
// are atomic. The caches must outlive it.
#ifndef BATON_ENGINE_KV_SHARDS_H_
#define BATON_ENGINE_KV_SHARDS_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "engine/block_pool.h"
#include "engine/kv_cache.h"

namespace baton::engine {

class KvShards {
 public:
  struct Rank {
    KvCache* cache = nullptr;
    int32_t first_kv_head = 0;  // of the whole model's heads; it holds cache->kv_dim() / head_dim
  };
  // The whole model's n_kv_head and head_dim; every head held by some rank.
  KvShards(std::vector<Rank> ranks, int32_t n_kv_head, int32_t head_dim);

  int32_t size() const { return static_cast<int32_t>(ranks_.size()); }
  // The whole model's KV width (n_kv_head * head_dim), and its layer block: f16 elements, bytes.
  int32_t kv_dim() const { return kv_dim_; }
  int64_t layer_block_elements() const { return layer_block_bytes_ / sizeof(uint16_t); }
  int64_t layer_block_bytes() const { return layer_block_bytes_; }

  // out [layer_block_bytes()] = block `id` of `layer`, each head from the first rank holding it.
  void Assemble(int32_t layer, BlockId id, uint8_t* out) const;
  // Writes the whole-model block `in` of `layer` into block `id` of every rank: each its heads.
  void Scatter(int32_t layer, BlockId id, const uint8_t* in);

  // Bytes Scatter has written into rank r's cache so far.
  int64_t bytes_scattered(int32_t rank) const { return scattered_[rank].load(); }

 private:
  const std::vector<Rank> ranks_;
  const int32_t n_kv_head_;
  const int32_t kv_dim_;
  int32_t planes_ = 0;
  int64_t head_bytes_ = 0;  // one head of one plane: block_size * head_dim f16
  int64_t layer_block_bytes_ = 0;
  std::vector<int32_t> heads_;    // [rank] heads it holds
  std::vector<int32_t> sources_;  // [head] the first rank holding it
  std::unique_ptr<std::atomic<int64_t>[]> scattered_;
};

}  // namespace baton::engine

#endif  // BATON_ENGINE_KV_SHARDS_H_
