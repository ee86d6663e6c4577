// Causal prefill attention on the tensor cores, FlashAttention-2 style, over the paged cache
// (for chunked prefills and prefix-cache hits alike: the keys come through the block table):
// a warp takes 16 queries of one head (an AttentionTile) and walks their keys 16 or 32 at a
// time, S = Q Kᵀ and O += P V in f16 mma tiles with f32 accumulation and an online softmax
// (flash_attention_warp.h, whose lane logic the CPU tests run around an emulated instruction).
// Grouped-query heads, sliding windows and sinks as the other attention kernels
// (paged_attention.cuh). Head sizes 64, 96, 128 and 256.
//
// Not yet the backend's default: CudaBackendOptions::flash_attention turns it on, until a run
// on a GPU has measured it. Compute capability 8.0 or newer.
// Thread-safety: launches only; the stream orders them.
#ifndef BATON_KERNELS_CUDA_FLASH_ATTENTION_CUH_
#define BATON_KERNELS_CUDA_FLASH_ATTENTION_CUH_

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/attention_batch.h"

namespace baton::kernels::cuda {

bool FlashAttentionSupports(const KvLayout& layout);

// As LaunchTiledAttention (paged_attention.cuh), for layouts FlashAttentionSupports.
void LaunchFlashAttention(const AttentionSeq* seqs, const AttentionTile* tiles, int64_t n_tiles,
                          const AttentionQuery* queries, const int32_t* tables, int32_t n_head,
                          const KvLayout& layout, float scale, const float* sinks,
                          cudaStream_t stream);

}  // namespace baton::kernels::cuda

#endif  // BATON_KERNELS_CUDA_FLASH_ATTENTION_CUH_
