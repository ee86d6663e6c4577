// AVX2 + FMA + F16C attention over the paged f16 KV cache and SiLU-gated product (see
// isa_kernels.h). Attention is FlashAttention-style: one pass over a segment's keys in chunks of
// kChunk tokens with an online softmax (running max m and sum l; the output accumulator is
// rescaled by exp(m_old - m_new) when the max grows), computed in f32 and vectorized over
// head_dim. The query heads that share a kv head are processed together, so each K/V row is
// converted from f16 once for them, and several queries (a prefill's) share each chunk's
// converted rows; scores of 8 keys are reduced together (transposed horizontal sums).
//
// Batch invariance: segment and chunk boundaries are fixed token indices, and each head's
// arithmetic does not depend on the other heads or queries.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "kernels/backend.h"
#include "kernels/cpu/isa_kernels.h"
#include "kernels/cpu/kv_prefetch.h"

// Everything below may use AVX2, FMA and F16C (headers are all above).
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c"))), apply_to = function)
#else
#pragma GCC target("avx2,fma,f16c")
#endif

namespace baton::kernels {
namespace {

#include "kernels/cpu/exp_avx2.inc"

constexpr int kChunk = 32;                          // keys per online-softmax step
constexpr int kMaxGroup = 8;                        // query heads processed together
constexpr int kMaxHeadDim = kAttentionMaxHeadDim;   // larger: the reference path

#include "kernels/cpu/horizontal_avx2.inc"
#include "kernels/cpu/rope_rotate.inc"

inline float Exp1(float x) { return _mm256_cvtss_f32(Exp256(_mm256_set1_ps(x))); }

inline __m256 LoadF16x8(const uint16_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

// The 8 dot products of q [d_head] with the rows k[0..8) (`stride` floats apart), in order.
inline __m256 Dot8(const float* q, const float* k, int d_head, int stride) {
  __m256 s[8];
#pragma GCC unroll 8
  for (int i = 0; i < 8; ++i) s[i] = _mm256_setzero_ps();
  for (int d = 0; d < d_head; d += 8) {
    const __m256 qv = _mm256_loadu_ps(q + d);
#pragma GCC unroll 8
    for (int i = 0; i < 8; ++i) {
      s[i] = _mm256_fmadd_ps(qv, _mm256_load_ps(k + i * stride + d), s[i]);
    }
  }
  const __m256 u0 = _mm256_hadd_ps(_mm256_hadd_ps(s[0], s[1]), _mm256_hadd_ps(s[2], s[3]));
  const __m256 u1 = _mm256_hadd_ps(_mm256_hadd_ps(s[4], s[5]), _mm256_hadd_ps(s[6], s[7]));
  return _mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20), _mm256_permute2f128_ps(u0, u1, 0x31));
}

// Floats per converted row: padded, so that the rows of a chunk do not alias in 4K.
constexpr int kRowStride = kMaxHeadDim + 8;

// A chunk's K rows, and V rows where several queries share them, converted from f16 (exact).
// k's rows past the chunk's last key are zero up to the next multiple of 8 (Dot8 reads 8).
struct ChunkRows {
  alignas(32) float k[kChunk][kRowStride];
  alignas(32) float v[kChunk][kRowStride];
};

// The calling thread's chunk rows, shared by both entry points below.
ChunkRows& ThreadChunkRows() {
  static thread_local ChunkRows rows;
  return rows;
}

// Converts the K rows (and the V rows where `with_v`) of tokens [t0, t0 + count) of kv head kv_h.
void LoadChunk(const KvLayerView& kv, int32_t kv_h, int32_t t0, int count, bool with_v,
               ChunkRows* rows) {
  const int d_head = kv.head_dim;
  for (int c = 0; c < count; ++c) {
    const int64_t offset = kv.RowOffset(t0 + c, kv_h);
    for (int d = 0; d < d_head; d += 8) {
      _mm256_store_ps(&rows->k[c][d], LoadF16x8(kv.k_base + offset + d));
      if (with_v) _mm256_store_ps(&rows->v[c][d], LoadF16x8(kv.v_base + offset + d));
    }
  }
  for (int c = count; c < (count + 7) / 8 * 8; ++c) {
    for (int d = 0; d < d_head; d += 8) _mm256_store_ps(&rows->k[c][d], _mm256_setzero_ps());
  }
}

// Where a chunk step reads V: 8 floats of key c's row from dimension d. ConvertedV: the chunk's
// f32 copy, converted once for the several queries that share it. CacheV: the cache itself, each
// vector converted as it is read (one query shares nothing). Both give the same values.
struct ConvertedV {
  const ChunkRows* rows;
  __m256 V(int c, int d) const { return _mm256_load_ps(&rows->v[c][d]); }
};

struct CacheV {
  const uint16_t* v[kChunk];
  CacheV(const KvLayerView& kv, int32_t kv_h, int32_t t0, int count) {
    for (int c = 0; c < count; ++c) v[c] = kv.v_base + kv.RowOffset(t0 + c, kv_h);
  }
  __m256 V(int c, int d) const { return LoadF16x8(v[c] + d); }
};

// The online-softmax step of G query heads q [G, d_head] with state [G, AttentionPartialSize]
// (m, l, acc as in a partial, isa_kernels.h) over a chunk whose first `count` keys are theirs:
// scores, then the new max, the rescale factor, the probabilities and their sum, then
// acc = acc * corr + sum_c p[c] * V[c]. Each head's arithmetic is the same for any G.
template <int G, class VRows>
void ChunkStep(const float* q, int d_head, const ChunkRows& rows, const VRows& vrows, int count,
               float scale, float* state) {
  // Accumulators per pass over the head dimension: enough independent FMA chains to hide their
  // latency (8 or more where they fit), few enough to stay in 16 registers with G broadcasts
  // and a V vector.
  constexpr int kPass = G <= 3 ? 4 : G == 4 ? 2 : 1;
  const int64_t size = AttentionPartialSize(d_head);
  const int count8 = (count + 7) / 8 * 8;
  const __m256 scale_v = _mm256_set1_ps(scale);
  alignas(32) float p[G][kChunk];
  float corr[G];
#pragma GCC unroll 8
  for (int g = 0; g < G; ++g) {
    float* st = state + g * size;
    for (int c = 0; c < count8; c += 8) {
      const __m256 dots = Dot8(q + g * d_head, &rows.k[c][0], d_head, kRowStride);
      _mm256_store_ps(&p[g][c], _mm256_mul_ps(dots, scale_v));
    }
    for (int c = count; c < kChunk; ++c) p[g][c] = -INFINITY;
    __m256 mx = _mm256_load_ps(&p[g][0]);
    for (int c = 8; c < kChunk; c += 8) mx = _mm256_max_ps(mx, _mm256_load_ps(&p[g][c]));
    const float m_new = std::fmax(st[0], HorizontalMax(mx));
    corr[g] = Exp1(st[0] - m_new);
    const __m256 mv = _mm256_set1_ps(m_new);
    __m256 sum = _mm256_setzero_ps();
    for (int c = 0; c < kChunk; c += 8) {
      const __m256 e = Exp256(_mm256_sub_ps(_mm256_load_ps(&p[g][c]), mv));
      _mm256_store_ps(&p[g][c], e);
      sum = _mm256_add_ps(sum, e);
    }
    st[1] = st[1] * corr[g] + HorizontalSum(sum);
    st[0] = m_new;
  }
  int d = 0;
  for (; d + 8 * kPass <= d_head; d += 8 * kPass) {
    __m256 a[G][kPass];
#pragma GCC unroll 8
    for (int g = 0; g < G; ++g) {
      const __m256 cg = _mm256_set1_ps(corr[g]);
#pragma GCC unroll 4
      for (int j = 0; j < kPass; ++j) {
        a[g][j] = _mm256_mul_ps(_mm256_loadu_ps(state + g * size + 2 + d + 8 * j), cg);
      }
    }
    for (int c = 0; c < count; ++c) {
#pragma GCC unroll 4
      for (int j = 0; j < kPass; ++j) {
        const __m256 v8 = vrows.V(c, d + 8 * j);
#pragma GCC unroll 8
        for (int g = 0; g < G; ++g) {
          a[g][j] = _mm256_fmadd_ps(_mm256_broadcast_ss(&p[g][c]), v8, a[g][j]);
        }
      }
    }
#pragma GCC unroll 8
    for (int g = 0; g < G; ++g) {
#pragma GCC unroll 4
      for (int j = 0; j < kPass; ++j) _mm256_storeu_ps(state + g * size + 2 + d + 8 * j, a[g][j]);
    }
  }
  for (; d < d_head; d += 8) {
    __m256 a[G];
#pragma GCC unroll 8
    for (int g = 0; g < G; ++g) {
      a[g] = _mm256_mul_ps(_mm256_loadu_ps(state + g * size + 2 + d), _mm256_set1_ps(corr[g]));
    }
    for (int c = 0; c < count; ++c) {
      const __m256 v8 = vrows.V(c, d);
#pragma GCC unroll 8
      for (int g = 0; g < G; ++g) a[g] = _mm256_fmadd_ps(_mm256_broadcast_ss(&p[g][c]), v8, a[g]);
    }
#pragma GCC unroll 8
    for (int g = 0; g < G; ++g) _mm256_storeu_ps(state + g * size + 2 + d, a[g]);
  }
}

// One query's `group` heads, q [group, d_head] and state [group, AttentionPartialSize], through
// a chunk, kMaxGroup at a time.
template <class VRows>
void GroupStep(const float* q, int32_t group, int d_head, const ChunkRows& rows,
               const VRows& vrows, int count, float scale, float* state) {
  const int64_t size = AttentionPartialSize(d_head);
  for (int32_t g0 = 0; g0 < group; g0 += kMaxGroup) {
    const float* qg = q + static_cast<int64_t>(g0) * d_head;
    float* sg = state + g0 * size;
    switch (std::min(group - g0, kMaxGroup)) {
      case 1: ChunkStep<1>(qg, d_head, rows, vrows, count, scale, sg); break;
      case 2: ChunkStep<2>(qg, d_head, rows, vrows, count, scale, sg); break;
      case 3: ChunkStep<3>(qg, d_head, rows, vrows, count, scale, sg); break;
      case 4: ChunkStep<4>(qg, d_head, rows, vrows, count, scale, sg); break;
      case 5: ChunkStep<5>(qg, d_head, rows, vrows, count, scale, sg); break;
      case 6: ChunkStep<6>(qg, d_head, rows, vrows, count, scale, sg); break;
      case 7: ChunkStep<7>(qg, d_head, rows, vrows, count, scale, sg); break;
      default: ChunkStep<8>(qg, d_head, rows, vrows, count, scale, sg); break;
    }
  }
}

void AttentionPartialAvx2(const float* q, int32_t kv_h, int32_t group, int32_t t_begin,
                          int32_t t_end, const KvLayerView& kv, float scale, float* partial) {
  ChunkRows& rows = ThreadChunkRows();
  AttentionInitState(group, kv.head_dim, partial);
  for (int32_t t0 = t_begin; t0 < t_end; t0 += kChunk) {
    const int count = std::min(kChunk, t_end - t0);
    PrefetchKvRows(kv, kv_h, t0 + kChunk, std::min(t_end, t0 + 2 * kChunk));  // the next chunk
    LoadChunk(kv, kv_h, t0, count, /*with_v=*/false, &rows);
    GroupStep(q, group, kv.head_dim, rows, CacheV(kv, kv_h, t0, count), count, scale, partial);
  }
}

// Several queries: each chunk's K and V rows are converted once for all of them.
void AttentionPartialQueriesAvx2(const float* q, int64_t q_stride, int32_t n_q,
                                 const int32_t* t_end, int32_t kv_h, int32_t group,
                                 int32_t t_begin, const KvLayerView& kv, float scale,
                                 float* partial, int64_t partial_stride) {
  if (n_q == 1) {
    if (t_end[0] > t_begin) {
      AttentionPartialAvx2(q, kv_h, group, t_begin, t_end[0], kv, scale, partial);
    }
    return;
  }
  ChunkRows& rows = ThreadChunkRows();
  int32_t last = t_begin;
  for (int32_t j = 0; j < n_q; ++j) {
    if (t_end[j] <= t_begin) continue;
    last = std::max(last, t_end[j]);
    AttentionInitState(group, kv.head_dim, partial + j * partial_stride);
  }
  for (int32_t t0 = t_begin; t0 < last; t0 += kChunk) {
    PrefetchKvRows(kv, kv_h, t0 + kChunk, std::min(last, t0 + 2 * kChunk));  // the next chunk
    LoadChunk(kv, kv_h, t0, std::min(kChunk, last - t0), /*with_v=*/true, &rows);
    for (int32_t j = 0; j < n_q; ++j) {
      if (t_end[j] <= t0) continue;
      GroupStep(q + j * q_stride, group, kv.head_dim, rows, ConvertedV{&rows},
                std::min(kChunk, t_end[j] - t0), scale, partial + j * partial_stride);
    }
  }
}

void AttentionFoldAvx2(const float* partial, int32_t group, int32_t head_dim, float* state) {
  const int64_t size = AttentionPartialSize(head_dim);
  for (int32_t g = 0; g < group; ++g) {
    const float* p = partial + g * size;
    float* s = state + g * size;
    const float m_new = std::fmax(s[0], p[0]);
    const float a = Exp1(s[0] - m_new);
    const float b = Exp1(p[0] - m_new);
    s[0] = m_new;
    s[1] = s[1] * a + p[1] * b;
    const __m256 av = _mm256_set1_ps(a), bv = _mm256_set1_ps(b);
    for (int d = 0; d < head_dim; d += 8) {
      const __m256 acc = _mm256_mul_ps(_mm256_loadu_ps(s + 2 + d), av);
      _mm256_storeu_ps(s + 2 + d, _mm256_fmadd_ps(_mm256_loadu_ps(p + 2 + d), bv, acc));
    }
  }
}

void AttentionFinishAvx2(const float* state, int32_t group, int32_t head_dim, float* out) {
  const int64_t size = AttentionPartialSize(head_dim);
  for (int32_t g = 0; g < group; ++g) {
    const float* s = state + g * size;
    const __m256 lv = _mm256_set1_ps(s[1]);
    for (int d = 0; d < head_dim; d += 8) {
      _mm256_storeu_ps(out + g * head_dim + d, _mm256_div_ps(_mm256_loadu_ps(s + 2 + d), lv));
    }
  }
}

// silu(g) * u = g / (1 + exp(-g)) * u on 8 lanes.
inline __m256 SiluMul8(__m256 g, __m256 u) {
  const __m256 e = Exp256(_mm256_sub_ps(_mm256_setzero_ps(), g));
  return _mm256_mul_ps(_mm256_div_ps(g, _mm256_add_ps(_mm256_set1_ps(1.0f), e)), u);
}

void SiluMulAvx2(const float* gate, const float* up, int64_t count, float* y) {
  int64_t i = 0;
  for (; i + 8 <= count; i += 8) {
    _mm256_storeu_ps(y + i, SiluMul8(_mm256_loadu_ps(gate + i), _mm256_loadu_ps(up + i)));
  }
  if (i < count) {  // the tail through the same lanes, so every element gets the same arithmetic
    alignas(32) float g[8] = {}, u[8] = {}, r[8];
    std::memcpy(g, gate + i, (count - i) * sizeof(float));
    std::memcpy(u, up + i, (count - i) * sizeof(float));
    _mm256_store_ps(r, SiluMul8(_mm256_load_ps(g), _mm256_load_ps(u)));
    std::memcpy(y + i, r, (count - i) * sizeof(float));
  }
}

}  // namespace

void FillAvx2AttentionKernels(IsaKernels* k) {
  k->attention_partial = AttentionPartialAvx2;
  k->attention_partial_queries = AttentionPartialQueriesAvx2;
  k->attention_fold = AttentionFoldAvx2;
  k->attention_finish = AttentionFinishAvx2;
  k->silu_mul = SiluMulAvx2;
  k->rope_rotate = RotateHeads;
}

}  // namespace baton::kernels

#if defined(__clang__)
#pragma clang attribute pop
#endif
