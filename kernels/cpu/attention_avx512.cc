// Attention and the SiLU-gated product of the avx512-vnni and amx levels (see isa_kernels.h).
//
// Attention is FlashAttention-style, as at the AVX2 level (attention_avx2.cc, whose fold and
// finish it shares): over a segment's keys in chunks of 16 (one key per lane), with an online
// softmax in f32. Per chunk and head: each key's score is a product and fma chain over the
// head's 16-float vectors, its lanes then summed (ReduceAdd16x16, 16 keys at once), times the
// scale; lanes past the query's last key are -inf; m' = max(m, max score), corr = exp(m - m'),
// p = exp(score - m'), l = l * corr + (sum of p), acc = acc * corr + sum over the keys in order of
// p * V. exp is GGML's ggml_v_expf.
// Several queries go through a segment together (AttentionPartialQueriesFn): each chunk's K and
// V rows are converted from f16 once for all of their heads, which a prefill's queries share.
//
// Batch invariance: chunk boundaries are fixed token indices (t_begin is a multiple of the
// segment), and each head's arithmetic depends only on its query, its last key and the cache.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <utility>

#include "kernels/backend.h"
#include "kernels/cpu/isa_kernels.h"

// Everything below may use AVX-512 F/BW/VL/DQ besides AVX2, FMA and F16C (headers are above).
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq"))), apply_to = function)
#else
#pragma GCC target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq")
#endif
#if !defined(__clang__)  // a GCC-only warning
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#pragma GCC diagnostic ignored "-Wuninitialized"

namespace baton::kernels {
namespace {

constexpr int kChunk = 16;  // keys per online-softmax step: one per lane

// exp(x) on 16 floats as GGML computes it on AVX-512 (ggml_v_expf, after Arm's optimized-routines
// expf): n = round(x / ln 2) through the 1.5 * 2^23 shift, reduced argument b = x - n ln 2 in two
// fused steps, the degree-5 polynomial ((c5 b + c4) u + (c3 b + c2)) u + (c1 b + 1) with u = b^2,
// scaled by 2^n (vscalefps); |n| > 192 gives 0 (n <= 0) or infinity. Error about 1.5 ulp.
inline __m512 ExpGgml(__m512 x) {
  const __m512 shift = _mm512_set1_ps(0x1.8p23f);
  const __m512 z = _mm512_fmadd_ps(x, _mm512_set1_ps(0x1.715476p+0f), shift);
  const __m512 n = _mm512_sub_ps(z, shift);
  const __m512 b = _mm512_fnmadd_ps(n, _mm512_set1_ps(0x1.7f7d1cp-20f),
                                    _mm512_fnmadd_ps(n, _mm512_set1_ps(0x1.62e4p-1f), x));
  const __mmask16 out_of_range =
      _mm512_cmp_ps_mask(_mm512_abs_ps(n), _mm512_set1_ps(192.0f), _CMP_GT_OQ);
  const __m512 u = _mm512_mul_ps(b, b);
  const __m512 high = _mm512_fmadd_ps(
      _mm512_fmadd_ps(_mm512_set1_ps(0x1.0e4020p-7f), b, _mm512_set1_ps(0x1.573e2ep-5f)), u,
      _mm512_fmadd_ps(_mm512_set1_ps(0x1.555e66p-3f), b, _mm512_set1_ps(0x1.fffdb6p-2f)));
  const __m512 poly =
      _mm512_fmadd_ps(high, u, _mm512_fmadd_ps(_mm512_set1_ps(0x1.ffffecp-1f), b, _mm512_set1_ps(1.0f)));
  const __m512 result = _mm512_scalef_ps(poly, n);
  if (out_of_range == 0) return result;
  const __m512 zero = _mm512_setzero_ps();
  const __m512 limit = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(n, zero, _CMP_LE_OQ),
                                            _mm512_set1_ps(INFINITY), zero);
  return _mm512_mask_blend_ps(out_of_range, result, limit);
}

// The 16 sums of 16 vectors at once: lane t of the result is the sum of r[t]'s lanes (GCC's
// _mm512_reduce_add_ps tree: halves, quarters, then (0 + 2) + (1 + 3)), shared by shuffles.
inline __m512 ReduceAdd16x16(const __m512* r) {
  __m512 c[8], d[4], e[2];
#pragma GCC unroll 8
  for (int m = 0; m < 8; ++m) {  // halves: [r[2m] lanes i + (8 + i) | r[2m + 1] the same]
    c[m] = _mm512_add_ps(_mm512_shuffle_f32x4(r[2 * m], r[2 * m + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                         _mm512_shuffle_f32x4(r[2 * m], r[2 * m + 1], _MM_SHUFFLE(3, 2, 3, 2)));
  }
#pragma GCC unroll 8
  for (int m = 0; m < 4; ++m) {  // quarters: vectors 4m .. 4m + 3, lanes i + (4 + i)
    d[m] = _mm512_add_ps(_mm512_shuffle_f32x4(c[2 * m], c[2 * m + 1], _MM_SHUFFLE(2, 0, 2, 0)),
                         _mm512_shuffle_f32x4(c[2 * m], c[2 * m + 1], _MM_SHUFFLE(3, 1, 3, 1)));
  }
#pragma GCC unroll 8
  for (int m = 0; m < 2; ++m) {  // lanes 0 + 2 and 1 + 3 of each quarter
    e[m] = _mm512_add_ps(_mm512_shuffle_ps(d[2 * m], d[2 * m + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                         _mm512_shuffle_ps(d[2 * m], d[2 * m + 1], _MM_SHUFFLE(3, 2, 3, 2)));
  }
  const __m512 f = _mm512_add_ps(_mm512_shuffle_ps(e[0], e[1], _MM_SHUFFLE(2, 0, 2, 0)),
                                 _mm512_shuffle_ps(e[0], e[1], _MM_SHUFFLE(3, 1, 3, 1)));
  // Lane 4q + s of f is vector q + 4s.
  const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  return _mm512_permutexvar_ps(order, f);
}

// The chunk's K and V rows, converted to f32 (rows past the chunk's last key: K zero, V unread).
struct ChunkRows {
  alignas(64) float k[kChunk][kAttentionMaxHeadDim];
  alignas(64) float v[kChunk][kAttentionMaxHeadDim];
};

// Converts the K and V rows of tokens [t0, t0 + count) of kv head kv_h into rows; `vectors`
// 16-float vectors per row, the last masked by `tail`.
void LoadChunk(const KvLayerView& kv, int32_t kv_h, int32_t t0, int count, int vectors,
               __mmask16 tail, ChunkRows* rows) {
  for (int c = 0; c < kChunk; ++c) {
    if (c >= count) {
      for (int v = 0; v < vectors; ++v) {
        _mm512_store_ps(&rows->k[c][16 * v], _mm512_setzero_ps());
      }
      continue;
    }
    const int64_t offset = kv.RowOffset(t0 + c, kv_h);
    for (int v = 0; v < vectors; ++v) {
      const __mmask16 m = v + 1 == vectors ? tail : __mmask16{0xffff};
      const __m256i k16 = _mm256_maskz_loadu_epi16(m, kv.k_base + offset + 16 * v);
      const __m256i v16 = _mm256_maskz_loadu_epi16(m, kv.v_base + offset + 16 * v);
      _mm512_store_ps(&rows->k[c][16 * v], _mm512_cvtph_ps(k16));
      _mm512_store_ps(&rows->v[c][16 * v], _mm512_cvtph_ps(v16));
    }
  }
}

// One head's online-softmax step over a chunk whose first `count` keys are the head's:
// state = (m, l, acc[kVectors * 16]) as in a partial (isa_kernels.h).
template <int kVectors>
void HeadChunk(const float* q, const ChunkRows& rows, int count, float scale, float* state) {
  __m512 r[kChunk];
  {
    const __m512 q0 = _mm512_loadu_ps(q);
#pragma GCC unroll 16
    for (int c = 0; c < kChunk; ++c) r[c] = _mm512_mul_ps(_mm512_load_ps(&rows.k[c][0]), q0);
  }
#pragma GCC unroll 16
  for (int v = 1; v < kVectors; ++v) {
    const __m512 qv = _mm512_loadu_ps(q + 16 * v);
#pragma GCC unroll 16
    for (int c = 0; c < kChunk; ++c) {
      r[c] = _mm512_fmadd_ps(_mm512_load_ps(&rows.k[c][16 * v]), qv, r[c]);
    }
  }
  const __mmask16 live = static_cast<__mmask16>((1u << count) - 1);
  const __m512 scores = _mm512_mask_blend_ps(
      live, _mm512_set1_ps(-INFINITY), _mm512_mul_ps(ReduceAdd16x16(r), _mm512_set1_ps(scale)));
  const float m = state[0];
  const float m_new = std::fmax(m, _mm512_reduce_max_ps(scores));
  const float corr = _mm512_cvtss_f32(ExpGgml(_mm512_set1_ps(m - m_new)));
  const __m512 p = ExpGgml(_mm512_sub_ps(scores, _mm512_set1_ps(m_new)));
  state[0] = m_new;
  state[1] = state[1] * corr + _mm512_reduce_add_ps(p);
  alignas(64) float pc[kChunk];
  _mm512_store_ps(pc, p);
  float* acc = state + 2;
  __m512 a[kVectors];
  const __m512 corr_v = _mm512_set1_ps(corr);
#pragma GCC unroll 16
  for (int v = 0; v < kVectors; ++v) a[v] = _mm512_mul_ps(_mm512_loadu_ps(acc + 16 * v), corr_v);
  for (int c = 0; c < count; ++c) {
    const __m512 pv = _mm512_set1_ps(pc[c]);
#pragma GCC unroll 16
    for (int v = 0; v < kVectors; ++v) {
      a[v] = _mm512_fmadd_ps(pv, _mm512_load_ps(&rows.v[c][16 * v]), a[v]);
    }
  }
#pragma GCC unroll 16
  for (int v = 0; v < kVectors; ++v) _mm512_storeu_ps(acc + 16 * v, a[v]);
}

using HeadChunkFn = void (*)(const float*, const ChunkRows&, int, float, float*);

template <int... kVectors>
constexpr HeadChunkFn HeadChunkFor(int vectors, std::integer_sequence<int, kVectors...>) {
  HeadChunkFn fn = nullptr;
  ((fn = vectors == kVectors + 1 ? HeadChunk<kVectors + 1> : fn), ...);
  return fn;
}

void AttentionPartialQueriesAvx512(const float* q, int64_t q_stride, int32_t n_q,
                                   const int32_t* t_end, int32_t kv_h, int32_t group,
                                   int32_t t_begin, const KvLayerView& kv, float scale,
                                   float* partial, int64_t partial_stride) {
  const int d = kv.head_dim;
  const int vectors = (d + 15) / 16;
  const __mmask16 tail = static_cast<__mmask16>(d % 16 == 0 ? 0xffff : (1u << (d % 16)) - 1);
  const int64_t size = AttentionPartialSize(d);
  int32_t last = t_begin;
  for (int32_t j = 0; j < n_q; ++j) {
    if (t_end[j] <= t_begin) continue;
    last = std::max(last, t_end[j]);
    AttentionInitState(group, d, partial + j * partial_stride);
  }
  static thread_local ChunkRows rows;
  const HeadChunkFn head_chunk =
      HeadChunkFor(vectors, std::make_integer_sequence<int, kAttentionMaxHeadDim / 16>());
  for (int32_t t0 = t_begin; t0 < last; t0 += kChunk) {
    LoadChunk(kv, kv_h, t0, std::min(kChunk, last - t0), vectors, tail, &rows);
    for (int32_t j = 0; j < n_q; ++j) {
      if (t_end[j] <= t0) continue;
      const int count = std::min(kChunk, t_end[j] - t0);
      for (int32_t g = 0; g < group; ++g) {
        const float* qh = q + j * q_stride + static_cast<int64_t>(g) * d;
        float* state = partial + j * partial_stride + g * size;
        if (d % 16 == 0) {
          head_chunk(qh, rows, count, scale, state);
          continue;
        }
        // A head dimension that is not a whole number of vectors: q and acc padded with zeros.
        alignas(64) float qp[kAttentionMaxHeadDim] = {};
        alignas(64) float padded[2 + kAttentionMaxHeadDim];
        std::memcpy(qp, qh, d * sizeof(float));
        std::memset(padded, 0, sizeof padded);
        std::memcpy(padded, state, size * sizeof(float));
        head_chunk(qp, rows, count, scale, padded);
        std::memcpy(state, padded, size * sizeof(float));
      }
    }
  }
}

void AttentionPartialAvx512(const float* q, int32_t kv_h, int32_t group, int32_t t_begin,
                            int32_t t_end, const KvLayerView& kv, float scale, float* partial) {
  AttentionPartialQueriesAvx512(q, 0, 1, &t_end, kv_h, group, t_begin, kv, scale, partial, 0);
}

// GGML's ggml_vec_swiglu_f32 on AVX-512: (g / (1 + exp(0 - g))) * u, the tail through the same
// (masked) lanes so that every element gets the same arithmetic.
inline __m512 SiluMul16(__m512 g, __m512 u) {
  const __m512 e = ExpGgml(_mm512_sub_ps(_mm512_setzero_ps(), g));
  return _mm512_mul_ps(_mm512_div_ps(g, _mm512_add_ps(_mm512_set1_ps(1.0f), e)), u);
}

void SiluMulAvx512(const float* gate, const float* up, int64_t count, float* y) {
  int64_t i = 0;
  for (; i + 16 <= count; i += 16) {
    _mm512_storeu_ps(y + i, SiluMul16(_mm512_loadu_ps(gate + i), _mm512_loadu_ps(up + i)));
  }
  if (i < count) {
    const __mmask16 m = static_cast<__mmask16>((1u << (count - i)) - 1);
    _mm512_mask_storeu_ps(y + i, m, SiluMul16(_mm512_maskz_loadu_ps(m, gate + i),
                                              _mm512_maskz_loadu_ps(m, up + i)));
  }
}

}  // namespace

void FillAvx512AttentionKernels(IsaKernels* k) {
  k->attention_partial = AttentionPartialAvx512;
  k->attention_partial_queries = AttentionPartialQueriesAvx512;
  k->silu_mul = SiluMulAvx512;
}

}  // namespace baton::kernels

#if defined(__clang__)
#pragma clang attribute pop
#endif
