#include "kernels/cuda/flash_attention.cuh"

#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda/flash_attention_warp.h"
#include "kernels/cuda/mma.cuh"

namespace baton::kernels::cuda {
namespace {

constexpr int kWarps = 4;  // heads a CTA

// The sum (or maximum) of v over the 4 lanes of the calling lane's quad.
__device__ __forceinline__ float QuadSum(float v) {
  v += __shfl_xor_sync(0xffffffffu, v, 1);
  return v + __shfl_xor_sync(0xffffffffu, v, 2);
}
__device__ __forceinline__ float QuadMax(float v) {
  v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
  return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}

// blockIdx.x: the tile; warp w of blockIdx.y: head kWarps blockIdx.y + w.
template <int kHeadDim, int kKeyTiles>
__global__ void __launch_bounds__(kWarps * 32)
    FlashAttentionKernel(const AttentionSeq* seqs, const AttentionTile* tiles,
                         const AttentionQuery* queries, const int32_t* tables, int32_t n_head,
                         KvLayout layout, float scale, const float* sinks) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int h = blockIdx.y * kWarps + warp;
  if (h >= n_head) return;  // the whole warp
  const AttentionTile tile = tiles[blockIdx.x];
  const AttentionSeq seq = seqs[tile.seq];
  const FlashProblem p{.q = seq.q, .out = seq.out, .k_base = seq.k_base, .v_base = seq.v_base,
                       .table = tables + seq.table_begin, .layout = layout, .n_head = n_head,
                       .scale = scale, .sinks = sinks};
  using Tile = FlashWarpTile<kHeadDim, kKeyTiles>;
  Tile w(p, queries + tile.first_query, tile.count, h, lane);
  for (int32_t first_key = w.FirstKey(); first_key <= w.LastKey(); first_key += Tile::kKeys) {
    float s[kKeyTiles][4];
#pragma unroll
    for (int j = 0; j < kKeyTiles; ++j) {
      s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.0f;
#pragma unroll
      for (int ks = 0; ks < Tile::kDimSteps; ++ks) {
        uint32_t b[2];
        w.KeyFragment(first_key, j, ks, b);
        MmaF16(w.QueryFragment(ks), b, s[j]);
      }
    }
    float max[2];
    w.Score(first_key, s, max);
    max[0] = QuadMax(max[0]);
    max[1] = QuadMax(max[1]);
    uint32_t pa[Tile::kKeySteps][4];
    w.Absorb(s, max, pa);
#pragma unroll
    for (int kk = 0; kk < Tile::kKeySteps; ++kk) {
#pragma unroll
      for (int d = 0; d < Tile::kDimTiles; ++d) {
        uint32_t b[2];
        w.ValueFragment(first_key, kk, d, b);
        MmaF16(pa[kk], b, w.Output(d));
      }
    }
  }
  const float sum[2] = {QuadSum(w.Sum(0)), QuadSum(w.Sum(1))};
  w.Store(sum);
}

template <int kHeadDim, int kKeyTiles>
void Launch(const AttentionSeq* seqs, const AttentionTile* tiles, int64_t n_tiles,
            const AttentionQuery* queries, const int32_t* tables, int32_t n_head,
            const KvLayout& layout, float scale, const float* sinks, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(n_tiles),
                  static_cast<unsigned>((n_head + kWarps - 1) / kWarps));
  FlashAttentionKernel<kHeadDim, kKeyTiles><<<grid, kWarps * 32, 0, stream>>>(
      seqs, tiles, queries, tables, n_head, layout, scale, sinks);
}

}  // namespace

bool FlashAttentionSupports(const KvLayout& layout) {
  const int d = layout.head_dim;
  return d == 64 || d == 96 || d == 128 || d == 256;
}

void LaunchFlashAttention(const AttentionSeq* seqs, const AttentionTile* tiles, int64_t n_tiles,
                          const AttentionQuery* queries, const int32_t* tables, int32_t n_head,
                          const KvLayout& layout, float scale, const float* sinks,
                          cudaStream_t stream) {
  if (n_tiles == 0) return;
  switch (layout.head_dim) {
    case 64: Launch<64, 4>(seqs, tiles, n_tiles, queries, tables, n_head, layout, scale, sinks,
                           stream); break;
    case 96: Launch<96, 4>(seqs, tiles, n_tiles, queries, tables, n_head, layout, scale, sinks,
                           stream); break;
    case 128: Launch<128, 4>(seqs, tiles, n_tiles, queries, tables, n_head, layout, scale,
                             sinks, stream); break;
    case 256: Launch<256, 2>(seqs, tiles, n_tiles, queries, tables, n_head, layout, scale,
                             sinks, stream); break;
    default:
      CudaFailed("LaunchFlashAttention", "heads of this size have no kernel (64, 96, 128, 256)",
                 __FILE__, __LINE__);
  }
  BATON_CUDA_CHECK_LAUNCH();
}

}  // namespace baton::kernels::cuda
