// The CUDA backend's paged KV cache operations: storing K/V rows into their blocks, and causal
// attention of a batch of sequences' queries over their own blocks (kernels/backend.h's
// KvLayerView layout: block b's K at k_base + b * block_stride, f16 [n_kv_head, block_size,
// head_dim], kernels/kv_block_layout.h). Every pointer is device memory.
//
// Attention: for decode, one thread block per (query, head), four warps taking every fourth
// chunk of 32 keys, a key per lane, with an online softmax each, merged at the end; lane l holds
// dims l, l + 32, ... of the output (head_dim <= 256, or 544 to 576 for latent attention; a key
// per warp step where rows are not 16-byte aligned). For prefill, tiles of 16 queries share each
// key (LaunchTiledAttention).
// Thread-safety: launches only; the stream orders them.
#ifndef BATON_KERNELS_CUDA_PAGED_ATTENTION_CUH_
#define BATON_KERNELS_CUDA_PAGED_ATTENTION_CUH_

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/attention_batch.h"
#include "kernels/kv_block_layout.h"

namespace baton::kernels::cuda {

constexpr int32_t kMaxAttentionHeadDim = 256;


// K and V rows [n, n_kv_head * head_dim] f32 stored as f16 at positions [n] of the sequence
// whose block table is `table`.
void LaunchWriteKv(uint16_t* k_base, uint16_t* v_base, const KvLayout& layout,
                   const int32_t* table, const int32_t* positions, int64_t n, const float* k,
                   const float* v, cudaStream_t stream);

// AttentionSeq, AttentionQuery, AttentionTile: attention_batch.h.

// All cache layouts of a batch are the same but for their block tables. sinks: null or [n_head]
// (Backend::Attention). One block per (query, head): the kernel for decode queries.
// bases_16_byte_aligned: every sequence's k_base and v_base is (the key-per-lane kernel reads K
// rows 16 bytes at a time).
void LaunchAttention(const AttentionSeq* seqs, const AttentionQuery* queries, int64_t n_queries,
                     const int32_t* tables, int32_t n_head, const KvLayout& layout, float scale,
                     const float* sinks, bool bases_16_byte_aligned, cudaStream_t stream);

// The same attention, one block per (tile, head): the kernel for prefills, which shares each
// key's K and V among a tile's queries. Only for layouts TiledAttentionSupports (head_dim <= 128).
bool TiledAttentionSupports(const KvLayout& layout);
void LaunchTiledAttention(const AttentionSeq* seqs, const AttentionTile* tiles, int64_t n_tiles,
                          const AttentionQuery* queries, const int32_t* tables, int32_t n_head,
                          const KvLayout& layout, float scale, const float* sinks,
                          cudaStream_t stream);

}  // namespace baton::kernels::cuda

#endif  // BATON_KERNELS_CUDA_PAGED_ATTENTION_CUH_
