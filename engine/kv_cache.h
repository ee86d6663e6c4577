// The paged KV cache: memory for every layer's K and V, in fixed-size blocks of tokens, and the
// block tables through which sequences own blocks.
//
// Memory layout (f16): [n_layer][n_blocks][K|V][n_kv_head][block_size][head_dim], in the backend's
// memory (Backend::Allocate; what a block holds before it is written is undefined). One layer's
// block of one sequence — its K then its V — is contiguous: the unit the KV hand-off sends.
//
// Planning is separate from committing: BlocksNeeded() says what a growth would take, Reserve()
// takes it all or changes nothing.
// Thread-safety: the block pool is thread-safe; Reserve/Free on a BlockTable need the caller to
// own that table; reading and writing block memory of a sequence needs the caller to own it.
#ifndef BATON_ENGINE_KV_CACHE_H_
#define BATON_ENGINE_KV_CACHE_H_

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/block_pool.h"
#include "engine/model_config.h"
#include "kernels/backend.h"
#include "kernels/backend_buffer.h"

namespace baton::engine {

// The blocks one sequence holds, in token order, and how many tokens they contain.
struct BlockTable {
  std::vector<BlockId> blocks;
  int32_t n_tokens = 0;  // tokens whose K/V are written
};

struct KvCacheOptions {
  int32_t block_size = 16;  // tokens per block
  int32_t n_blocks = 0;     // physical blocks (all layers share block ids)
};

class KvCache {
 public:
  // The memory comes from `backend`, which must outlive the cache. RESOURCE_EXHAUSTED when it
  // has not that much.
  static absl::StatusOr<std::unique_ptr<KvCache>> Create(const ModelConfig& config,
                                                         const KvCacheOptions& options,
                                                         kernels::Backend& backend);

  // Blocks that fit in `bytes` of memory for this model (>= 0).
  static int32_t BlocksForBytes(const ModelConfig& config, int32_t block_size, int64_t bytes);

  // The backend whose memory holds the blocks.
  kernels::Backend& backend() const { return backend_; }
  BlockPool& pool() { return pool_; }
  const BlockPool& pool() const { return pool_; }
  int32_t block_size() const { return block_size_; }
  int32_t n_layer() const { return n_layer_; }
  int32_t kv_dim() const { return kv_dim_; }
  // f16 elements of one block of one layer, K and V together.
  int64_t layer_block_elements() const { return 2 * block_elements_; }

  // Additional blocks `table` needs to hold n_tokens tokens.
  int32_t BlocksNeeded(const BlockTable& table, int32_t n_tokens) const;
  // Grows `table` to hold n_tokens tokens: all the blocks or RESOURCE_EXHAUSTED and no change.
  absl::Status Reserve(BlockTable& table, int32_t n_tokens);
  // Returns every block of `table` to the pool and empties it.
  void Free(BlockTable& table);
  // Forgets the K/V of the tokens at positions >= n_tokens (n_tokens <= table.n_tokens) and
  // returns to the pool every block past the first max(keep_blocks, blocks n_tokens needs).
  void Truncate(BlockTable& table, int32_t n_tokens, int32_t keep_blocks);

  // f16 [2][n_kv_head][block_size][head_dim]: K then V of block `id` in `layer`, in the
  // backend's memory (kernels/kv_block_layout.h).
  uint16_t* LayerBlock(int32_t layer, BlockId id);
  const uint16_t* LayerBlock(int32_t layer, BlockId id) const;

  // The view through which the backend writes (Backend::WriteKv) and attends to (Attention) the
  // first `n_tokens` tokens of the sequence in `layer`; the table must hold their blocks.
  kernels::KvLayerView LayerView(int32_t layer, const BlockTable& table, int32_t n_tokens) const;

 private:
  KvCache(const ModelConfig& config, const KvCacheOptions& options, kernels::Backend& backend);

  const int32_t n_layer_;
  const int32_t n_kv_head_;
  const int32_t head_dim_;
  const int32_t kv_dim_;
  const int32_t block_size_;
  const int32_t n_blocks_;
  const int64_t block_elements_;  // block_size * kv_dim: one of K or V
  BlockPool pool_;
  kernels::Backend& backend_;
  kernels::BackendBuffer memory_;  // f16 [n_layer, n_blocks, 2, n_kv_head, block_size, head_dim]
};

}  // namespace baton::engine

#endif  // BATON_ENGINE_KV_CACHE_H_
