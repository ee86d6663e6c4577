#include "kernels/cuda/paged_attention.cuh"

#include <cuda_fp16.h>

#include <algorithm>

#include "kernels/cuda/cuda_check.cuh"

namespace baton::kernels::cuda {
namespace {

constexpr int kWarps = 4;

__device__ __forceinline__ int64_t KvRowOffset(const KvLayout& layout, const int32_t* table,
                                               int32_t t, int32_t kv_h) {
  return table[t / layout.block_size] * layout.block_stride +
         (static_cast<int64_t>(t % layout.block_size) * layout.n_kv_head + kv_h) *
             layout.head_dim;
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

__device__ __forceinline__ float WarpSum(float v) {
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

// kDims = ceil(head_dim / 32): the dims each lane holds.
template <int kDims>
__global__ void AttentionKernel(const AttentionSeq* seqs, const AttentionQuery* queries,
                                const int32_t* tables, int32_t n_head, KvLayout layout,
                                float scale) {
  const AttentionQuery query = queries[blockIdx.x];
  const AttentionSeq seq = seqs[query.seq];
  const int32_t* table = tables + seq.table_begin;
  const int h = blockIdx.y;
  const int kv_h = h / (n_head / layout.n_kv_head);
  const int d = layout.head_dim;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const float* q = seq.q + (static_cast<int64_t>(query.row) * n_head + h) * d;

  float qr[kDims], acc[kDims];
#pragma unroll
  for (int i = 0; i < kDims; ++i) {
    const int j = lane + 32 * i;
    qr[i] = j < d ? q[j] : 0.0f;
    acc[i] = 0.0f;
  }
  float m = -INFINITY, l = 0.0f;
  for (int32_t t = warp; t <= query.position; t += kWarps) {
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

  __shared__ float warp_max[kWarps], warp_sum[kWarps];
  __shared__ float warp_acc[kWarps][32 * kDims];
  if (lane == 0) {
    warp_max[warp] = m;
    warp_sum[warp] = l;
  }
#pragma unroll
  for (int i = 0; i < kDims; ++i) warp_acc[warp][lane + 32 * i] = acc[i];
  __syncthreads();
  float max_all = warp_max[0];  // warp 0 has key 0: finite
  for (int w = 1; w < kWarps; ++w) max_all = fmaxf(max_all, warp_max[w]);
  float weight[kWarps];
  float sum = 0.0f;
  for (int w = 0; w < kWarps; ++w) {
    weight[w] = warp_sum[w] > 0.0f ? expf(warp_max[w] - max_all) : 0.0f;
    sum += warp_sum[w] * weight[w];
  }
  float* out = seq.out + (static_cast<int64_t>(query.row) * n_head + h) * d;
  for (int j = threadIdx.x; j < d; j += blockDim.x) {
    float o = 0.0f;
    for (int w = 0; w < kWarps; ++w) o += warp_acc[w][j] * weight[w];
    out[j] = o / sum;
  }
}

unsigned BlocksFor(int64_t n, int threads) {
  return static_cast<unsigned>(std::max<int64_t>(1, (n + threads - 1) / threads));
}

template <int kDims>
void LaunchAttentionFor(const AttentionSeq* seqs, const AttentionQuery* queries,
                        int64_t n_queries, const int32_t* tables, int32_t n_head,
                        const KvLayout& layout, float scale, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(n_queries), static_cast<unsigned>(n_head));
  AttentionKernel<kDims><<<grid, kWarps * 32, 0, stream>>>(seqs, queries, tables, n_head, layout,
                                                          scale);
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
                     cudaStream_t stream) {
  if (n_queries == 0) return;
  switch ((layout.head_dim + 31) / 32) {
    case 1: LaunchAttentionFor<1>(seqs, queries, n_queries, tables, n_head, layout, scale, stream);
      break;
    case 2: LaunchAttentionFor<2>(seqs, queries, n_queries, tables, n_head, layout, scale, stream);
      break;
    case 3: LaunchAttentionFor<3>(seqs, queries, n_queries, tables, n_head, layout, scale, stream);
      break;
    case 4: LaunchAttentionFor<4>(seqs, queries, n_queries, tables, n_head, layout, scale, stream);
      break;
    case 5:
    case 6: LaunchAttentionFor<6>(seqs, queries, n_queries, tables, n_head, layout, scale, stream);
      break;
    default:
      LaunchAttentionFor<8>(seqs, queries, n_queries, tables, n_head, layout, scale, stream);
      break;
  }
  BATON_CUDA_CHECK_LAUNCH();
}

}  // namespace baton::kernels::cuda
