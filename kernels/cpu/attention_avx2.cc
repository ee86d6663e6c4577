// AVX2 + FMA + F16C attention over the paged f16 KV cache and SiLU-gated product (see
// isa_kernels.h). Attention is FlashAttention-style: one pass over a segment's keys in chunks of
// kChunk tokens with an online softmax (running max m and sum l; the output accumulator is
// rescaled by exp(m_old - m_new) when the max grows), computed in f32 and vectorized over
// head_dim. The query heads that share a kv head are processed together, so each K/V row is
// converted from f16 once; scores of 8 keys are reduced together (transposed horizontal sums).
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
    for (int i = 0; i < 8; ++i) s[i] = _mm256_fmadd_ps(qv, _mm256_load_ps(k + i * stride + d), s[i]);
  }
  const __m256 u0 = _mm256_hadd_ps(_mm256_hadd_ps(s[0], s[1]), _mm256_hadd_ps(s[2], s[3]));
  const __m256 u1 = _mm256_hadd_ps(_mm256_hadd_ps(s[4], s[5]), _mm256_hadd_ps(s[6], s[7]));
  return _mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20), _mm256_permute2f128_ps(u0, u1, 0x31));
}

// G query heads q [G, head_dim] against kv head kv_h over keys [t_begin, t_end):
// partial [G, 2 + head_dim] = (m, l, acc).
template <int G>
void AttentionSegment(const float* q, int32_t kv_h, int32_t t_begin, int32_t t_end,
                      const KvLayerView& kv, float scale, float* partial) {
  // Accumulators per pass over the head dimension: enough independent FMA chains to hide their
  // latency, few enough to stay in 16 registers.
  constexpr int kPass = G == 1 ? 4 : G == 2 ? 3 : G <= 4 ? 2 : 1;
  const int d_head = kv.head_dim;
  alignas(32) float acc[G][kMaxHeadDim];
  alignas(32) float k_f32[kChunk][kMaxHeadDim + 8];  // padded: no 4K aliasing between rows
  alignas(32) float p[G][kChunk];
  float m[G], l[G], corr[G];
  for (int g = 0; g < G; ++g) {
    m[g] = -INFINITY;
    l[g] = 0.0f;
    for (int d = 0; d < d_head; ++d) acc[g][d] = 0.0f;
  }
  const uint16_t* v_rows[kChunk];
  const __m256 scale_v = _mm256_set1_ps(scale);
  for (int32_t t0 = t_begin; t0 < t_end; t0 += kChunk) {
    const int count = t_end - t0 < kChunk ? t_end - t0 : kChunk;
    const int count8 = (count + 7) / 8 * 8;
    PrefetchKvRows(kv, kv_h, t0 + kChunk, std::min(t_end, t0 + 2 * kChunk));  // the next chunk
    for (int c = 0; c < count; ++c) {
      const int32_t t = t0 + c;
      const int64_t offset = kv.RowOffset(t, kv_h);
      const uint16_t* k_row = kv.k_base + offset;
      for (int d = 0; d < d_head; d += 8) _mm256_store_ps(&k_f32[c][d], LoadF16x8(k_row + d));
      v_rows[c] = kv.v_base + offset;
    }
    for (int c = count; c < count8; ++c) {
      for (int d = 0; d < d_head; d += 8) _mm256_store_ps(&k_f32[c][d], _mm256_setzero_ps());
    }
    // Scores, then the online-softmax update: new max, rescale factor, probabilities, their sum.
#pragma GCC unroll 8
    for (int g = 0; g < G; ++g) {
      for (int c = 0; c < count8; c += 8) {
        _mm256_store_ps(&p[g][c],
                        _mm256_mul_ps(Dot8(q + g * d_head, &k_f32[c][0], d_head, kMaxHeadDim + 8), scale_v));
      }
      for (int c = count; c < kChunk; ++c) p[g][c] = -INFINITY;
      __m256 mx = _mm256_load_ps(&p[g][0]);
      for (int c = 8; c < kChunk; c += 8) mx = _mm256_max_ps(mx, _mm256_load_ps(&p[g][c]));
      const float m_new = std::fmax(m[g], HorizontalMax(mx));
      corr[g] = Exp1(m[g] - m_new);
      const __m256 mv = _mm256_set1_ps(m_new);
      __m256 sum = _mm256_setzero_ps();
      for (int c = 0; c < kChunk; c += 8) {
        const __m256 e = Exp256(_mm256_sub_ps(_mm256_load_ps(&p[g][c]), mv));
        _mm256_store_ps(&p[g][c], e);
        sum = _mm256_add_ps(sum, e);
      }
      l[g] = l[g] * corr[g] + HorizontalSum(sum);
      m[g] = m_new;
    }
    // acc = acc * corr + sum_c p[c] * V[c], kPass vectors of 8 dims at a time.
    int d = 0;
    for (; d + 8 * kPass <= d_head; d += 8 * kPass) {
      __m256 a[G][kPass];
#pragma GCC unroll 8
      for (int g = 0; g < G; ++g) {
        const __m256 cg = _mm256_set1_ps(corr[g]);
#pragma GCC unroll 4
        for (int j = 0; j < kPass; ++j) a[g][j] = _mm256_mul_ps(_mm256_load_ps(&acc[g][d + 8 * j]), cg);
      }
      for (int c = 0; c < count; ++c) {
#pragma GCC unroll 4
        for (int j = 0; j < kPass; ++j) {
          const __m256 v8 = LoadF16x8(v_rows[c] + d + 8 * j);
#pragma GCC unroll 8
          for (int g = 0; g < G; ++g) a[g][j] = _mm256_fmadd_ps(_mm256_broadcast_ss(&p[g][c]), v8, a[g][j]);
        }
      }
#pragma GCC unroll 8
      for (int g = 0; g < G; ++g) {
#pragma GCC unroll 4
        for (int j = 0; j < kPass; ++j) _mm256_store_ps(&acc[g][d + 8 * j], a[g][j]);
      }
    }
    for (; d < d_head; d += 8) {
      __m256 a[G];
#pragma GCC unroll 8
      for (int g = 0; g < G; ++g) a[g] = _mm256_mul_ps(_mm256_load_ps(&acc[g][d]), _mm256_set1_ps(corr[g]));
      for (int c = 0; c < count; ++c) {
        const __m256 v8 = LoadF16x8(v_rows[c] + d);
#pragma GCC unroll 8
        for (int g = 0; g < G; ++g) a[g] = _mm256_fmadd_ps(_mm256_broadcast_ss(&p[g][c]), v8, a[g]);
      }
#pragma GCC unroll 8
      for (int g = 0; g < G; ++g) _mm256_store_ps(&acc[g][d], a[g]);
    }
  }
  const int64_t size = AttentionPartialSize(d_head);
  for (int g = 0; g < G; ++g) {
    float* out = partial + g * size;
    out[0] = m[g];
    out[1] = l[g];
    std::memcpy(out + 2, acc[g], d_head * sizeof(float));
  }
}

void AttentionPartialAvx2(const float* q, int32_t kv_h, int32_t group, int32_t t_begin,
                          int32_t t_end, const KvLayerView& kv, float scale, float* partial) {
  const int64_t size = AttentionPartialSize(kv.head_dim);
  for (int32_t g0 = 0; g0 < group; g0 += kMaxGroup) {
    const int32_t n = group - g0 < kMaxGroup ? group - g0 : kMaxGroup;
    const float* qg = q + static_cast<int64_t>(g0) * kv.head_dim;
    float* pg = partial + g0 * size;
    switch (n) {
      case 1: AttentionSegment<1>(qg, kv_h, t_begin, t_end, kv, scale, pg); break;
      case 2: AttentionSegment<2>(qg, kv_h, t_begin, t_end, kv, scale, pg); break;
      case 3: AttentionSegment<3>(qg, kv_h, t_begin, t_end, kv, scale, pg); break;
      case 4: AttentionSegment<4>(qg, kv_h, t_begin, t_end, kv, scale, pg); break;
      case 5: AttentionSegment<5>(qg, kv_h, t_begin, t_end, kv, scale, pg); break;
      case 6: AttentionSegment<6>(qg, kv_h, t_begin, t_end, kv, scale, pg); break;
      case 7: AttentionSegment<7>(qg, kv_h, t_begin, t_end, kv, scale, pg); break;
      default: AttentionSegment<8>(qg, kv_h, t_begin, t_end, kv, scale, pg); break;
    }
  }
}

void AttentionPartialQueriesAvx2(const float* q, int64_t q_stride, int32_t n_q,
                                 const int32_t* t_end, int32_t kv_h, int32_t group,
                                 int32_t t_begin, const KvLayerView& kv, float scale,
                                 float* partial, int64_t partial_stride) {
  for (int32_t j = 0; j < n_q; ++j) {
    if (t_end[j] <= t_begin) continue;
    AttentionPartialAvx2(q + j * q_stride, kv_h, group, t_begin, t_end[j], kv, scale,
                         partial + j * partial_stride);
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
