// The paged KV cache: memory for every layer's K and V, in fixed-size blocks of tokens, and the
// block tables through which sequences own blocks.
//
// Layers are paged in groups (engine/kv_layer_groups.h): a block holds one group's K and V for
// block_size tokens, and a sequence has one block table per group. A group of windowed layers
// (sliding-window attention) holds only the blocks its window can still see: blocks wholly before
// the first token that a query at the sequence's next position sees are returned to the pool
// (their entries become kNoBlock). A model without windows has one group: every layer's block
// under one id.
//
// Memory layout (f16): [layers_per_group][n_blocks][K|V][n_kv_head][block_size][head_dim], in the
// backend's memory (Backend::Allocate; what a block holds before it is written is undefined):
// layer l lives at slot slot_of[l], in the blocks of its group's table. One layer's block of one
// sequence — its K then its V — is contiguous: the unit the KV hand-off sends. A model whose
// attention reads V from K (ModelConfig::kv_planes() 1: latent attention) stores K alone, and
// its layer views give V K's base.
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
#include "engine/kv_layer_groups.h"
#include "engine/model_config.h"
#include "kernels/backend.h"
#include "kernels/backend_buffer.h"

namespace baton::engine {

// A block table's entry for a block that a windowed group no longer holds.
inline constexpr BlockId kNoBlock = -1;

// The blocks one sequence holds, in token order, and how many tokens they contain.
struct BlockTable {
  // groups[g][i]: group g's block for tokens [i * block_size, (i + 1) * block_size), or kNoBlock
  // where a windowed group let it go. Every group's vector has the same length (the table's
  // blocks), or the table is empty. A group's held entries are one run to its end: a window lets
  // go of blocks from the front, truncation drops them from the back.
  std::vector<std::vector<BlockId>> groups;
  int32_t n_tokens = 0;  // tokens whose K/V are written

  // Blocks the table spans, held or let go: room for n_blocks() * block_size tokens.
  int32_t n_blocks() const {
    return groups.empty() ? 0 : static_cast<int32_t>(groups[0].size());
  }
};

// Returns to `pool` the entries of `blocks` that are held (not kNoBlock), last to first.
void ReleaseHeld(BlockPool& pool, std::span<const BlockId> blocks);

struct KvCacheOptions {
  int32_t block_size = 16;  // tokens per block
  int32_t n_blocks = 0;     // physical blocks, each one group's K and V for block_size tokens
};

class KvCache {
 public:
  // The memory comes from `backend`, which must outlive the cache. RESOURCE_EXHAUSTED when it
  // has not that much.
  static absl::StatusOr<std::unique_ptr<KvCache>> Create(const ModelConfig& config,
                                                         const KvCacheOptions& options,
                                                         kernels::Backend& backend);

  // Bytes of one block for this model: one layer group's K and V for block_size tokens.
  static int64_t BlockBytes(const ModelConfig& config, int32_t block_size);
  // Blocks that fit in `bytes` of memory for this model (>= 0).
  static int32_t BlocksForBytes(const ModelConfig& config, int32_t block_size, int64_t bytes);
  // Blocks that hold n_tokens tokens in every layer group: a cache for one sequence that long.
  static int32_t BlocksForTokens(const ModelConfig& config, int32_t block_size, int64_t n_tokens);
  // The model's layers grouped by window, as the cache pages them.
  static KvLayerGroups LayerGroups(const ModelConfig& config);

  // The backend whose memory holds the blocks.
  kernels::Backend& backend() const { return backend_; }
  BlockPool& pool() { return pool_; }
  const BlockPool& pool() const { return pool_; }
  int32_t block_size() const { return block_size_; }
  int32_t n_layer() const { return n_layer_; }
  int32_t kv_dim() const { return kv_dim_; }
  int32_t kv_planes() const { return planes_; }  // ModelConfig::kv_planes()
  const KvLayerGroups& groups() const { return groups_; }
  // The most tokens one sequence can hold: every group holding a block for each of them.
  int64_t MaxSequenceTokens() const {
    return int64_t{n_blocks_} / groups_.n_groups() * block_size_;
  }
  // Layer `layer`'s sliding window (0: none).
  int32_t window(int32_t layer) const { return groups_.windows[groups_.group_of[layer]]; }
  // The first of the table's blocks that `layer` holds once queries start at `position`
  // (kernels/kv_block_layout.h FirstVisibleBlock; 0 for a layer without window).
  int32_t FirstHeldBlock(int32_t layer, int32_t position) const;
  // f16 elements of one block of one layer, K and V together (or K alone: kv_planes()).
  int64_t layer_block_elements() const { return planes_ * block_elements_; }

  // Additional blocks `table` needs to hold n_tokens tokens for queries from `first_query` on
  // (-1: table.n_tokens), counting no block that Reserve would let go first.
  int32_t BlocksNeeded(const BlockTable& table, int32_t n_tokens, int32_t first_query = -1) const;
  // Makes `table` hold n_tokens tokens for queries at positions >= first_query (-1:
  // table.n_tokens; never below it): first each windowed group lets go of the blocks no such
  // query sees (even when what follows fails), then every group takes the blocks it lacks,
  // windowed groups none that no such query sees. All the new blocks or RESOURCE_EXHAUSTED and
  // none taken. The table's n_tokens must never again go below first_query (Truncate): its
  // blocks may be gone.
  absl::Status Reserve(BlockTable& table, int32_t n_tokens, int32_t first_query = -1);
  // Returns every block of `table` to the pool and empties it.
  void Free(BlockTable& table);
  // Forgets the K/V of the tokens at positions >= n_tokens (n_tokens <= table.n_tokens) and
  // returns to the pool every block past the first max(keep_blocks, blocks n_tokens needs).
  // Returns the tokens the table keeps: n_tokens, or 0 (and the table freed) where n_tokens is
  // below the first_query of an earlier Reserve and a windowed group has let go of blocks that
  // queries from n_tokens on would see.
  int32_t Truncate(BlockTable& table, int32_t n_tokens, int32_t keep_blocks);
  // The blocks `table` holds, over all groups.
  int32_t HeldBlocks(const BlockTable& table) const;

  // f16 [2][n_kv_head][block_size][head_dim]: K then V of block `id` of `layer`'s group, in
  // the backend's memory (kernels/kv_block_layout.h).
  uint16_t* LayerBlock(int32_t layer, BlockId id);
  const uint16_t* LayerBlock(int32_t layer, BlockId id) const;
  // The same for the table's block `block` (< table.n_blocks(), held by layer's group).
  uint16_t* LayerBlock(int32_t layer, const BlockTable& table, int32_t block);

  // The view through which the backend writes (Backend::WriteKv) and attends to (Attention) the
  // first `n_tokens` tokens of the sequence in `layer`, with the layer's window; the table must
  // hold the blocks of those the queries see.
  kernels::KvLayerView LayerView(int32_t layer, const BlockTable& table, int32_t n_tokens) const;

 private:
  KvCache(const ModelConfig& config, const KvCacheOptions& options, kernels::Backend& backend);
  // Each windowed group of `table` lets go of its blocks that no query at `position` or after
  // sees.
  void LetGoHidden(BlockTable& table, int32_t position);
  // The first block of group `group` that queries at `position` and after see.
  int32_t GroupFirstBlock(int32_t group, int32_t position) const;
  // Whether the table holds every written block that queries from table.n_tokens on see.
  bool HoldsVisibleBlocks(const BlockTable& table) const;

  const int32_t n_layer_;
  const int32_t n_kv_head_;
  const int32_t head_dim_;
  const int32_t kv_dim_;
  const int32_t planes_;
  const int32_t block_size_;
  const int32_t n_blocks_;
  const int64_t block_elements_;  // block_size * kv_dim: one of K or V
  const KvLayerGroups groups_;
  BlockPool pool_;
  kernels::Backend& backend_;
  // f16 [layers_per_group, n_blocks, 2, n_kv_head, block_size, head_dim]
  kernels::BackendBuffer memory_;
};

}  // namespace baton::engine

#endif  // BATON_ENGINE_KV_CACHE_H_
