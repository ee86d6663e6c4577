// The index arrays of one attention call of the CUDA backend, built on the host in plain C++
// (tested without a GPU; paged_attention.cuh's kernels read them): which sequence each query row
// belongs to, the sequences' block tables one after another, and the prefills' queries cut into
// tiles of kAttentionTileQueries.
//
// Thread-safety: a value; one thread at a time.
#ifndef BATON_KERNELS_CUDA_ATTENTION_BATCH_H_
#define BATON_KERNELS_CUDA_ATTENTION_BATCH_H_

#include <cstdint>
#include <span>
#include <vector>

#include "kernels/backend.h"

namespace baton::kernels::cuda {

// A layer's paged cache as the kernels read it (kernels/kv_block_layout.h).
struct KvLayout {
  int64_t block_stride;  // elements
  int32_t block_size;
  int32_t n_kv_head;
  int32_t head_dim;
  int32_t window;  // KvLayerView::window: > 0, a query at p sees keys (p - window, p] only
};

// One sequence of a batch: its queries q [n_q, n_head, head_dim] and outputs, and its cache.
struct AttentionSeq {
  const float* q;
  float* out;
  const uint16_t* k_base;
  const uint16_t* v_base;
  int32_t table_begin;  // its block table's first entry in `tables`
};

// One query row: which sequence, which of its rows, and the position it attends up to.
struct AttentionQuery {
  int32_t seq;
  int32_t row;
  int32_t position;
};

// Up to kAttentionTileQueries consecutive entries of `queries`, all of one sequence: what one
// block of the tiled (prefill) kernel takes.
struct AttentionTile {
  int32_t seq;
  int32_t first_query;
  int32_t count;
};
constexpr int32_t kAttentionTileQueries = 16;

// Blocks of the sequence's table that hold its tokens.
inline int32_t BlocksOf(const KvLayerView& kv) {
  return (kv.n_tokens + kv.block_size - 1) / kv.block_size;
}

struct AttentionBatch {
  std::vector<AttentionSeq> seqs;               // [number of sequences]
  std::vector<int32_t> tables;                  // every sequence's BlocksOf entries, in order
  std::vector<AttentionQuery> decode_queries;   // rows for the one-query-a-block kernel
  std::vector<AttentionQuery> prefill_queries;  // the tiles' rows, tile after tile
  std::vector<AttentionTile> prefill_tiles;     // into prefill_queries
  bool bases_16_byte_aligned = true;            // every sequence's k_base and v_base

  // Rebuilds the arrays for `batch` (keeping their capacity). tiled: whether the layout has a
  // tiled kernel; a sequence of several queries then goes to it, every other query to the
  // one-query kernel.
  void Build(std::span<const AttentionQueries> batch, bool tiled);
};

}  // namespace baton::kernels::cuda

#endif  // BATON_KERNELS_CUDA_ATTENTION_BATCH_H_
