#include "kernels/cuda/paged_attention.cuh"

#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda/launch_helpers.cuh"

namespace baton::kernels::cuda {
namespace {

constexpr int kWarps = 4;

__device__ __forceinline__ int64_t KvRowOffset(const KvLayout& layout, const int32_t* table,
                                               int32_t t, int32_t kv_h) {
  return table[t / layout.block_size] * layout.block_stride +
         KvRowInBlock(t % layout.block_size, kv_h, layout.block_size, layout.head_dim);
}

// KvLayerView::FirstVisible.
__device__ __forceinline__ int32_t FirstVisible(const KvLayout& layout, int32_t position) {
  return FirstVisibleToken(layout.window, position);
}

__global__ void WriteKvKernel(__half* k_base, __half* v_base, KvLayout layout,
                              const int32_t* table, const int32_t* positions, int64_t total,
                              const float* k, const float* v) {
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= total) return;
  const int64_t kv_dim = static_cast<int64_t>(layout.n_kv_head) * layout.head_dim;
  const int64_t t = idx / kv_dim, e = idx % kv_dim;
  const int32_t kv_h = static_cast<int32_t>(e / layout.head_dim);
  const int64_t offset = KvRowOffset(layout, table, positions[t], kv_h) + e % layout.head_dim;
  k_base[offset] = __float2half_rn(k[idx]);
  v_base[offset] = __float2half_rn(v[idx]);
}

// What a decode-attention block (blockIdx.x: the query, blockIdx.y: the head) works on.
struct DecodeHead {
  AttentionQuery query;
  AttentionSeq seq;
  const int32_t* table;  // the sequence's block table
  int kv_h;              // the KV head the head reads (grouped-query attention)
  const float* q;        // the head's query [head_dim]
  float* out;            // its output [head_dim]
};

__device__ __forceinline__ DecodeHead DecodeHeadOfBlock(const AttentionSeq* seqs,
                                                        const AttentionQuery* queries,
                                                        const int32_t* tables, int32_t n_head,
                                                        const KvLayout& layout) {
  const AttentionQuery query = queries[blockIdx.x];
  const AttentionSeq seq = seqs[query.seq];
  const int h = blockIdx.y;
  const int64_t row = (static_cast<int64_t>(query.row) * n_head + h) * layout.head_dim;
  return {.query = query,
          .seq = seq,
          .table = tables + seq.table_begin,
          .kv_h = h / (n_head / layout.n_kv_head),
          .q = seq.q + row,
          .out = seq.out + row};
}

// The block's kWarps partial softmaxes (each warp's running max m, sum l and its lanes'
// accumulators acc: dims lane + 32 i) and the head's sink (a logit with no value; -inf: none)
// merged into out[0, d). Called by every thread.
template <int kDims>
__device__ void MergeWarpsInto(float m, float l, const float* acc, float sink, int d,
                               float* out) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  __shared__ float warp_max[kWarps], warp_sum[kWarps];
  __shared__ float warp_acc[kWarps][32 * kDims];
  if (lane == 0) {
    warp_max[warp] = m;
    warp_sum[warp] = l;
  }
#pragma unroll
  for (int i = 0; i < kDims; ++i) warp_acc[warp][lane + 32 * i] = acc[i];
  __syncthreads();
  float max_all = warp_max[0];  // warp 0 has the first visible key: finite
  for (int w = 1; w < kWarps; ++w) max_all = fmaxf(max_all, warp_max[w]);
  max_all = fmaxf(max_all, sink);
  float weight[kWarps];
  float sum = expf(sink - max_all);  // 0 without a sink
  for (int w = 0; w < kWarps; ++w) {
    weight[w] = warp_sum[w] > 0.0f ? expf(warp_max[w] - max_all) : 0.0f;
    sum += warp_sum[w] * weight[w];
  }
  for (int j = threadIdx.x; j < d; j += blockDim.x) {
    float o = 0.0f;
    for (int w = 0; w < kWarps; ++w) o += warp_acc[w][j] * weight[w];
    out[j] = o / sum;
  }
}

// kDims = ceil(head_dim / 32): the dims each lane holds.
template <int kDims>
__global__ void AttentionKernel(const AttentionSeq* seqs, const AttentionQuery* queries,
                                const int32_t* tables, int32_t n_head, KvLayout layout,
                                float scale, const float* sinks) {
  const DecodeHead head = DecodeHeadOfBlock(seqs, queries, tables, n_head, layout);
  const AttentionQuery& query = head.query;
  const AttentionSeq& seq = head.seq;
  const int32_t* table = head.table;
  const int kv_h = head.kv_h, d = layout.head_dim;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const float* q = head.q;

  float qr[kDims], acc[kDims];
#pragma unroll
  for (int i = 0; i < kDims; ++i) {
    const int j = lane + 32 * i;
    qr[i] = j < d ? q[j] : 0.0f;
    acc[i] = 0.0f;
  }
  float m = -INFINITY, l = 0.0f;
  for (int32_t t = FirstVisible(layout, query.position) + warp; t <= query.position;
       t += kWarps) {
    const int64_t offset = KvRowOffset(layout, table, t, kv_h);
    const __half* kr = reinterpret_cast<const __half*>(seq.k_base) + offset;
    const __half* vr = reinterpret_cast<const __half*>(seq.v_base) + offset;
    float dot = 0.0f;
#pragma unroll
    for (int i = 0; i < kDims; ++i) {
      const int j = lane + 32 * i;
      if (j < d) dot = fmaf(qr[i], __half2float(kr[j]), dot);
    }
    const float score = WarpSum(dot) * scale;
    const float m_new = fmaxf(m, score);
    const float correction = expf(m - m_new);
    const float p = expf(score - m_new);
    l = l * correction + p;
#pragma unroll
    for (int i = 0; i < kDims; ++i) {
      const int j = lane + 32 * i;
      const float vj = j < d ? __half2float(vr[j]) : 0.0f;
      acc[i] = fmaf(p, vj, acc[i] * correction);
    }
    m = m_new;
  }

  MergeWarpsInto<kDims>(m, l, acc, sinks != nullptr ? sinks[blockIdx.y] : -INFINITY, d,
                        head.out);
}

// Decode attention with a key per lane: each warp takes 32 keys at a time (warp w the chunks
// w, w + kWarps, ...), lane t scores key t against the query (its K row read with 16-byte loads,
// the query from shared memory), the warp folds the 32 scores into its online softmax at once,
// and lane l accumulates dims l, l + 32, ... of the chunk's V rows. A key's score is no longer a
// chain of shuffles: the scores of 32 keys are in flight together. head_dim a multiple of 8.
template <int kDims>
__global__ void __launch_bounds__(kWarps * 32)
    KeyPerLaneAttentionKernel(const AttentionSeq* seqs, const AttentionQuery* queries,
                              const int32_t* tables, int32_t n_head, KvLayout layout,
                              float scale, const float* sinks) {
  const DecodeHead head = DecodeHeadOfBlock(seqs, queries, tables, n_head, layout);
  const AttentionQuery& query = head.query;
  const AttentionSeq& seq = head.seq;
  const int32_t* table = head.table;
  const int kv_h = head.kv_h, d = layout.head_dim;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  __shared__ __align__(16) float qs[32 * kDims];
  for (int j = threadIdx.x; j < d; j += blockDim.x) qs[j] = head.q[j];
  __syncthreads();

  const auto* k_base = reinterpret_cast<const __half*>(seq.k_base);
  const auto* v_base = reinterpret_cast<const __half*>(seq.v_base);
  const int32_t n_keys = query.position + 1;
  float acc[kDims];
#pragma unroll
  for (int i = 0; i < kDims; ++i) acc[i] = 0.0f;
  float m = -INFINITY, l = 0.0f;
  for (int32_t first = FirstVisible(layout, query.position) + 32 * warp; first < n_keys;
       first += 32 * kWarps) {
    const int32_t t = first + lane;
    float score = -INFINITY;
    if (t < n_keys) {
      const __half* kr = k_base + KvRowOffset(layout, table, t, kv_h);
      float dot = 0.0f;
      for (int j = 0; j < d; j += 8) {
        const uint4 raw = *reinterpret_cast<const uint4*>(kr + j);
        const __half2* pairs = reinterpret_cast<const __half2*>(&raw);
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const float2 f = __half22float2(pairs[e]);
          dot = fmaf(qs[j + 2 * e], f.x, dot);
          dot = fmaf(qs[j + 2 * e + 1], f.y, dot);
        }
      }
      score = dot * scale;
    }
    float chunk_max = score;
    for (int offset = 16; offset > 0; offset /= 2) {
      chunk_max = fmaxf(chunk_max, __shfl_xor_sync(0xffffffffu, chunk_max, offset));
    }
    const float m_new = fmaxf(m, chunk_max);  // finite: key `first` is in range
    const float correction = expf(m - m_new);
    const float p = t < n_keys ? expf(score - m_new) : 0.0f;
    l = l * correction + WarpSum(p);
#pragma unroll
    for (int i = 0; i < kDims; ++i) acc[i] *= correction;
    const int32_t count = min(32, n_keys - first);
    for (int32_t k = 0; k < count; ++k) {
      const float pk = __shfl_sync(0xffffffffu, p, k);
      const __half* vr = v_base + KvRowOffset(layout, table, first + k, kv_h);
#pragma unroll
      for (int i = 0; i < kDims; ++i) {
        const int j = lane + 32 * i;
        if (j < d) acc[i] = fmaf(pk, __half2float(vr[j]), acc[i]);
      }
    }
    m = m_new;
  }
  MergeWarpsInto<kDims>(m, l, acc, sinks != nullptr ? sinks[blockIdx.y] : -INFINITY, d,
                        head.out);
}

// Prefill attention: a block takes one head and a tile of up to kTileQueries consecutive query
// rows of one sequence (each warp kQueriesPerWarp of them), and walks the keys up to the tile's
// last position 32 at a time: the block stages those keys' K and V rows in shared memory as f32
// once for all its queries; lane t scores key t against each of its warp's queries, an online
// softmax per query folds the 32 scores in, and lane l accumulates dims l, l + 32, ... of V.
// head_dim <= kMaxTiledHeadDim.
constexpr int kQueriesPerWarp = 4;
constexpr int kTileQueries = kWarps * kQueriesPerWarp;
static_assert(kTileQueries == kAttentionTileQueries);
constexpr int kKeysPerTile = 32;
constexpr int kMaxTiledHeadDim = 128;
constexpr int kKeyRowPad = 4;  // K rows padded so that float4 reads of 8 lanes hit 8 banks

template <int kDims>
__global__ void TiledAttentionKernel(const AttentionSeq* seqs, const AttentionTile* tiles,
                                     const AttentionQuery* queries, const int32_t* tables,
                                     int32_t n_head, KvLayout layout, float scale,
                                     const float* sinks) {
  constexpr int kD = kDims * 32;
  __shared__ __align__(16) float qs[kTileQueries][kD];
  __shared__ __align__(16) float ks[kKeysPerTile][kD + kKeyRowPad];
  __shared__ float vs[kKeysPerTile][kD];
  const AttentionTile tile = tiles[blockIdx.x];
  const AttentionSeq seq = seqs[tile.seq];
  const int32_t* table = tables + seq.table_begin;
  const int h = blockIdx.y;
  const int kv_h = h / (n_head / layout.n_kv_head);
  const int d = layout.head_dim;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;

  int32_t last_position = 0, first_position = INT32_MAX;
  for (int i = 0; i < tile.count; ++i) {
    last_position = max(last_position, queries[tile.first_query + i].position);
    first_position = min(first_position, queries[tile.first_query + i].position);
  }
  for (int idx = threadIdx.x; idx < kTileQueries * kD; idx += blockDim.x) {
    const int i = idx / kD, j = idx % kD;
    const int32_t row = queries[tile.first_query + min(i, tile.count - 1)].row;
    qs[i][j] = j < d ? seq.q[(static_cast<int64_t>(row) * n_head + h) * d + j] : 0.0f;
  }
  int32_t position[kQueriesPerWarp], first_visible[kQueriesPerWarp];
  float m[kQueriesPerWarp], l[kQueriesPerWarp], acc[kQueriesPerWarp][kDims];
#pragma unroll
  for (int qi = 0; qi < kQueriesPerWarp; ++qi) {
    const int i = warp * kQueriesPerWarp + qi;
    position[qi] = i < tile.count ? queries[tile.first_query + i].position : -1;
    first_visible[qi] = position[qi] >= 0 ? FirstVisible(layout, position[qi]) : 0;
    m[qi] = -INFINITY;
    l[qi] = 0.0f;
#pragma unroll
    for (int k = 0; k < kDims; ++k) acc[qi][k] = 0.0f;
  }

  // The query at the lowest position sees the lowest keys.
  // A windowed layer's cache may hold no block before the first visible key (engine/kv_cache.h):
  // keys of the tile's first rows below it are not read.
  const int32_t first_visible_key = FirstVisible(layout, first_position);
  const int32_t tile_first_key = first_visible_key / kKeysPerTile * kKeysPerTile;
  for (int32_t first_key = tile_first_key; first_key <= last_position;
       first_key += kKeysPerTile) {
    __syncthreads();  // the previous keys (and, the first time, the queries) are in place
    for (int idx = threadIdx.x; idx < kKeysPerTile * kD; idx += blockDim.x) {
      const int t = idx / kD, j = idx % kD;
      const int32_t key = first_key + t;
      float kv_k = 0.0f, kv_v = 0.0f;
      if (key >= first_visible_key && key <= last_position && j < d) {
        const int64_t offset = KvRowOffset(layout, table, key, kv_h) + j;
        kv_k = __half2float(reinterpret_cast<const __half*>(seq.k_base)[offset]);
        kv_v = __half2float(reinterpret_cast<const __half*>(seq.v_base)[offset]);
      }
      ks[t][j] = kv_k;
      vs[t][j] = kv_v;
    }
    __syncthreads();
    const int32_t key = first_key + lane;
    float score[kQueriesPerWarp];
#pragma unroll
    for (int qi = 0; qi < kQueriesPerWarp; ++qi) score[qi] = 0.0f;
    for (int j = 0; j < kD; j += 4) {
      const float4 kj = *reinterpret_cast<const float4*>(&ks[lane][j]);
#pragma unroll
      for (int qi = 0; qi < kQueriesPerWarp; ++qi) {
        const float4 qj = *reinterpret_cast<const float4*>(&qs[warp * kQueriesPerWarp + qi][j]);
        score[qi] = fmaf(qj.x, kj.x, score[qi]);
        score[qi] = fmaf(qj.y, kj.y, score[qi]);
        score[qi] = fmaf(qj.z, kj.z, score[qi]);
        score[qi] = fmaf(qj.w, kj.w, score[qi]);
      }
    }
#pragma unroll
    for (int qi = 0; qi < kQueriesPerWarp; ++qi) {
      // Warp-uniform: no key of this tile is visible (m would stay -inf).
      if (position[qi] < first_key || first_key + kKeysPerTile <= first_visible[qi]) continue;
      const float s =
          key <= position[qi] && key >= first_visible[qi] ? score[qi] * scale : -INFINITY;
      float tile_max = s;
      for (int offset = 16; offset > 0; offset /= 2) {
        tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, offset));
      }
      const float m_new = fmaxf(m[qi], tile_max);
      const float correction = expf(m[qi] - m_new);
      const float p = expf(s - m_new);
      l[qi] = l[qi] * correction + WarpSum(p);
#pragma unroll
      for (int k = 0; k < kDims; ++k) acc[qi][k] *= correction;
      for (int t = 0; t < kKeysPerTile; ++t) {
        const float pt = __shfl_sync(0xffffffffu, p, t);
#pragma unroll
        for (int k = 0; k < kDims; ++k) acc[qi][k] = fmaf(pt, vs[t][lane + 32 * k], acc[qi][k]);
      }
      m[qi] = m_new;
    }
  }
#pragma unroll
  for (int qi = 0; qi < kQueriesPerWarp; ++qi) {
    if (position[qi] < 0) continue;
    if (sinks != nullptr) {  // the head's sink joins the denominator (GGML's correction)
      const float m_new = fmaxf(m[qi], sinks[h]);
      const float correction = expf(m[qi] - m_new);
      l[qi] = l[qi] * correction + expf(sinks[h] - m_new);
#pragma unroll
      for (int k = 0; k < kDims; ++k) acc[qi][k] *= correction;
    }
    const int32_t row = queries[tile.first_query + warp * kQueriesPerWarp + qi].row;
    float* out = seq.out + (static_cast<int64_t>(row) * n_head + h) * d;
#pragma unroll
    for (int k = 0; k < kDims; ++k) {
      if (lane + 32 * k < d) out[lane + 32 * k] = acc[qi][k] / l[qi];
    }
  }
}

template <int kDims>
void LaunchAttentionFor(const AttentionSeq* seqs, const AttentionQuery* queries,
                        int64_t n_queries, const int32_t* tables, int32_t n_head,
                        const KvLayout& layout, float scale, const float* sinks,
                        bool rows_16_byte_aligned, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(n_queries), static_cast<unsigned>(n_head));
  if (rows_16_byte_aligned && layout.head_dim % 8 == 0 && layout.block_stride % 8 == 0) {
    KeyPerLaneAttentionKernel<kDims><<<grid, kWarps * 32, 0, stream>>>(
        seqs, queries, tables, n_head, layout, scale, sinks);
  } else {
    AttentionKernel<kDims><<<grid, kWarps * 32, 0, stream>>>(seqs, queries, tables, n_head,
                                                            layout, scale, sinks);
  }
}

template <int kDims>
void LaunchTiledAttentionFor(const AttentionSeq* seqs, const AttentionTile* tiles,
                             int64_t n_tiles, const AttentionQuery* queries,
                             const int32_t* tables, int32_t n_head, const KvLayout& layout,
                             float scale, const float* sinks, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(n_tiles), static_cast<unsigned>(n_head));
  TiledAttentionKernel<kDims><<<grid, kWarps * 32, 0, stream>>>(seqs, tiles, queries, tables,
                                                               n_head, layout, scale, sinks);
}

}  // namespace

void LaunchWriteKv(uint16_t* k_base, uint16_t* v_base, const KvLayout& layout,
                   const int32_t* table, const int32_t* positions, int64_t n, const float* k,
                   const float* v, cudaStream_t stream) {
  const int64_t total = n * layout.n_kv_head * layout.head_dim;
  if (total == 0) return;
  constexpr int kThreads = 256;
  WriteKvKernel<<<BlocksFor(total, kThreads), kThreads, 0, stream>>>(
      reinterpret_cast<__half*>(k_base), reinterpret_cast<__half*>(v_base), layout, table,
      positions, total, k, v);
  BATON_CUDA_CHECK_LAUNCH();
}

void LaunchAttention(const AttentionSeq* seqs, const AttentionQuery* queries, int64_t n_queries,
                     const int32_t* tables, int32_t n_head, const KvLayout& layout, float scale,
                     const float* sinks, bool bases_16_byte_aligned, cudaStream_t stream) {
  if (n_queries == 0) return;
  auto launch = [&](auto dims) {
    LaunchAttentionFor<decltype(dims)::value>(seqs, queries, n_queries, tables, n_head, layout,
                                              scale, sinks, bases_16_byte_aligned, stream);
  };
  switch ((layout.head_dim + 31) / 32) {
    case 1: launch(std::integral_constant<int, 1>{}); break;
    case 2: launch(std::integral_constant<int, 2>{}); break;
    case 3: launch(std::integral_constant<int, 3>{}); break;
    case 4: launch(std::integral_constant<int, 4>{}); break;
    case 5:
    case 6: launch(std::integral_constant<int, 6>{}); break;
    case 7:
    case 8: launch(std::integral_constant<int, 8>{}); break;
    // Multi-head latent attention's heads: 512 + 64 (DeepSeek).
    case 17:
    case 18: launch(std::integral_constant<int, 18>{}); break;
    default:
      CudaFailed("LaunchAttention", "heads of this size have no kernel (up to 256 values, or 576)",
                 __FILE__, __LINE__);
  }
  BATON_CUDA_CHECK_LAUNCH();
}

}  // namespace baton::kernels::cuda

namespace baton::kernels::cuda {

bool TiledAttentionSupports(const KvLayout& layout) {
  return layout.head_dim <= kMaxTiledHeadDim;
}

void LaunchTiledAttention(const AttentionSeq* seqs, const AttentionTile* tiles, int64_t n_tiles,
                          const AttentionQuery* queries, const int32_t* tables, int32_t n_head,
                          const KvLayout& layout, float scale, const float* sinks,
                          cudaStream_t stream) {
  if (n_tiles == 0) return;
  switch ((layout.head_dim + 31) / 32) {
    case 1: LaunchTiledAttentionFor<1>(seqs, tiles, n_tiles, queries, tables, n_head, layout,
                                       scale, sinks, stream);
      break;
    case 2: LaunchTiledAttentionFor<2>(seqs, tiles, n_tiles, queries, tables, n_head, layout,
                                       scale, sinks, stream);
      break;
    case 3: LaunchTiledAttentionFor<3>(seqs, tiles, n_tiles, queries, tables, n_head, layout,
                                       scale, sinks, stream);
      break;
    default: LaunchTiledAttentionFor<4>(seqs, tiles, n_tiles, queries, tables, n_head, layout,
                                        scale, sinks, stream);
      break;
  }
  BATON_CUDA_CHECK_LAUNCH();
}

}  // namespace baton::kernels::cuda
