// Attention and the SiLU-gated product of the avx512-vnni and amx levels (see isa_kernels.h), with
// GGML's arithmetic on AVX-512: what llama.cpp computes on such a CPU when it evaluates a token
// (non-flash attention over an f16 cache, the path its CPU backend takes by default).
//
// Attention of one head at position pos, GGML's ops in order:
//   kq    GGML's mul_mat of f16 K with Q: ggml_vec_dot_f16 per cached token (the caller rounds Q
//         to f16 first, as that mul_mat converts it): products in four 16-lane f32 accumulators
//         per 64 values, fused in order, summed (acc0 + acc2) + (acc1 + acc3) and across lanes
//         (the tree of GCC's _mm512_reduce_add_ps); values past the last multiple of 64 added in
//         f64; the f32 result times scale.
//   soft_max  max; e = ggml_v_expf(kq - max) 16 tokens at a time from token 0, their sums (the
//         same lane tree) added in f64; p = e * f32(1 / sum).
//   kqv   GGML's mul_mat of V with p: p rounded to f16 (that mul_mat's conversion of its f32
//         operand), then ggml_vec_dot_f16 over the tokens for every value dimension. Its vector
//         part covers the first multiple of 64 tokens of llama.cpp's KV window, which is the
//         tokens so far rounded up to 32 (the window's padding), and the rest is added in f64; so
//         tokens [64 * floor(pos / 64), pos] go the f64 way when pos % 64 < 32.
// Tokens past pos have probability 0 there and add exact zeros; they are skipped here.
//
// Batch invariance: each head's result depends only on its query, position and the cache.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

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

// Whether the probabilities are rounded to f16 before they weight V, as GGML's mul_mat with an
// f16 V does. Needed to compute llama.cpp's bits; it moves outputs by up to about 2^-12 of the
// largest |v| from the exact softmax(q·k)·v (about 1e-3 for values ~N(0, 1)).
constexpr bool kRoundProbabilitiesToF16 = true;

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

// GCC's _mm512_reduce_add_ps tree, written out: halves, quarters, then (0 + 2) + (1 + 3).
inline float ReduceAdd16(__m512 x) {
  const __m256 t3 = _mm256_add_ps(_mm512_extractf32x8_ps(x, 1), _mm512_castps512_ps256(x));
  const __m128 t6 = _mm_add_ps(_mm256_extractf128_ps(t3, 1), _mm256_castps256_ps128(t3));
  const __m128 t8 = _mm_add_ps(t6, _mm_shuffle_ps(t6, t6, _MM_SHUFFLE(1, 0, 3, 2)));
  return _mm_cvtss_f32(_mm_add_ss(t8, _mm_movehdup_ps(t8)));
}

inline __m512 LoadF16x16(const uint16_t* p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}

inline __m512 RoundToF16(__m512 x) {
  return _mm512_cvtph_ps(_mm512_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}

// ReduceAdd16 of 16 vectors at once: lane t of the result is ReduceAdd16(r[t]), the same
// additions in the same tree, shared between vectors by shuffles.
inline __m512 ReduceAdd16x16(const __m512* r) {
  __m512 c[8], d[4], e[2];
  for (int m = 0; m < 8; ++m) {  // halves: [r[2m] lanes i + (8 + i) | r[2m + 1] the same]
    c[m] = _mm512_add_ps(_mm512_shuffle_f32x4(r[2 * m], r[2 * m + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                         _mm512_shuffle_f32x4(r[2 * m], r[2 * m + 1], _MM_SHUFFLE(3, 2, 3, 2)));
  }
  for (int m = 0; m < 4; ++m) {  // quarters: vectors 4m .. 4m + 3, lanes i + (4 + i)
    d[m] = _mm512_add_ps(_mm512_shuffle_f32x4(c[2 * m], c[2 * m + 1], _MM_SHUFFLE(2, 0, 2, 0)),
                         _mm512_shuffle_f32x4(c[2 * m], c[2 * m + 1], _MM_SHUFFLE(3, 1, 3, 1)));
  }
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

// Element offsets of the cached rows of tokens 0..n-1 of kv head kv_h.
void RowOffsets(const KvLayerView& kv, int32_t kv_h, int32_t n, int64_t* rows) {
  for (int32_t t = 0; t < n; ++t) {
    rows[t] = kv.block_table[t / kv.block_size] * kv.block_stride +
              (static_cast<int64_t>(t % kv.block_size) * kv.n_kv_head + kv_h) * kv.head_dim;
  }
}

// kq * scale for tokens [0, n) of the G heads q [G, d], into scores[g][0..n) (rows of stride
// `stride`): ggml_vec_dot_f16 per token (see the file comment), 16 tokens at a time, each K row
// converted once for all heads.
void Scores(const float* q, int32_t group, int d, const uint16_t* k_base, const int64_t* rows,
            int32_t n, float scale, float* scores, int64_t stride) {
  constexpr int kMaxHeads = 8;
  const int np = d & ~63;
  alignas(64) __m512 r[kMaxHeads][16];
  for (int32_t g0 = 0; g0 < group; g0 += kMaxHeads) {
    const int heads = group - g0 < kMaxHeads ? group - g0 : kMaxHeads;
    for (int32_t t0 = 0; t0 < n; t0 += 16) {
      const int count = n - t0 < 16 ? n - t0 : 16;
      for (int c = 0; c < 16; ++c) {
        if (c >= count || np == 0) {
          for (int h = 0; h < heads; ++h) r[h][c] = _mm512_setzero_ps();
          continue;
        }
        const uint16_t* k = k_base + rows[t0 + c];
        if (np == 64) {
          const __m512 k0 = LoadF16x16(k), k1 = LoadF16x16(k + 16), k2 = LoadF16x16(k + 32),
                       k3 = LoadF16x16(k + 48);
          for (int h = 0; h < heads; ++h) {
            const float* qh = q + static_cast<int64_t>(g0 + h) * d;
            const __m512 s0 = _mm512_mul_ps(k0, _mm512_loadu_ps(qh));
            const __m512 s1 = _mm512_mul_ps(k1, _mm512_loadu_ps(qh + 16));
            const __m512 s2 = _mm512_mul_ps(k2, _mm512_loadu_ps(qh + 32));
            const __m512 s3 = _mm512_mul_ps(k3, _mm512_loadu_ps(qh + 48));
            r[h][c] = _mm512_add_ps(_mm512_add_ps(s0, s2), _mm512_add_ps(s1, s3));
          }
          continue;
        }
        for (int h = 0; h < heads; ++h) {
          const float* qh = q + static_cast<int64_t>(g0 + h) * d;
          __m512 s0 = _mm512_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
          for (int i = 0; i < np; i += 64) {
            s0 = _mm512_fmadd_ps(LoadF16x16(k + i), _mm512_loadu_ps(qh + i), s0);
            s1 = _mm512_fmadd_ps(LoadF16x16(k + i + 16), _mm512_loadu_ps(qh + i + 16), s1);
            s2 = _mm512_fmadd_ps(LoadF16x16(k + i + 32), _mm512_loadu_ps(qh + i + 32), s2);
            s3 = _mm512_fmadd_ps(LoadF16x16(k + i + 48), _mm512_loadu_ps(qh + i + 48), s3);
          }
          r[h][c] = _mm512_add_ps(_mm512_add_ps(s0, s2), _mm512_add_ps(s1, s3));
        }
      }
      for (int h = 0; h < heads; ++h) {
        const float* qh = q + static_cast<int64_t>(g0 + h) * d;
        float* sh = scores + (g0 + h) * stride;
        const __m512 dot = ReduceAdd16x16(r[h]);
        if (np == d) {
          _mm512_mask_storeu_ps(sh + t0, static_cast<__mmask16>((1u << count) - 1),
                                _mm512_mul_ps(dot, _mm512_set1_ps(scale)));
          continue;
        }
        // The values past the last multiple of 64, in f64.
        alignas(64) float dots[16];
        _mm512_store_ps(dots, dot);
        for (int c = 0; c < count; ++c) {
          const uint16_t* k = k_base + rows[t0 + c];
          alignas(64) float prod[64];
          for (int i = np; i < d; i += 16) {
            _mm512_store_ps(prod + i - np, _mm512_mul_ps(LoadF16x16(k + i), _mm512_loadu_ps(qh + i)));
          }
          double sum = dots[c];
          for (int i = 0; i < d - np; ++i) sum += static_cast<double>(prod[i]);
          sh[t0 + c] = static_cast<float>(sum) * scale;
        }
      }
    }
  }
}

// soft_max of one head's scores p[0..n) in place (see the file comment); p has room for n
// rounded up to 16.
void Softmax(float* p, int32_t n) {
  const int32_t n16 = (n + 15) / 16 * 16;
  __m512 mx = _mm512_set1_ps(-INFINITY);
  for (int32_t t0 = 0; t0 < n16; t0 += 16) {
    const __mmask16 live = n - t0 >= 16 ? __mmask16{0xffff}
                                        : static_cast<__mmask16>((1u << (n - t0)) - 1);
    mx = _mm512_mask_max_ps(mx, live, mx, _mm512_loadu_ps(p + t0));
  }
  const __m512 max_v = _mm512_set1_ps(_mm512_reduce_max_ps(mx));
  double sum = 0.0;
  for (int32_t t0 = 0; t0 < n16; t0 += 16) {
    const __mmask16 live = n - t0 >= 16 ? __mmask16{0xffff}
                                        : static_cast<__mmask16>((1u << (n - t0)) - 1);
    const __m512 e = _mm512_maskz_mov_ps(
        live, ExpGgml(_mm512_sub_ps(_mm512_maskz_loadu_ps(live, p + t0), max_v)));
    _mm512_storeu_ps(p + t0, e);
    sum += static_cast<double>(ReduceAdd16(e));
  }
  const __m512 inv = _mm512_set1_ps(static_cast<float>(1.0 / sum));
  for (int32_t t0 = 0; t0 < n16; t0 += 16) {
    __m512 prob = _mm512_mul_ps(_mm512_loadu_ps(p + t0), inv);
    if constexpr (kRoundProbabilitiesToF16) prob = RoundToF16(prob);
    _mm512_storeu_ps(p + t0, prob);
  }
}

// The vector part of kqv for NH heads and NV x 16 value dimensions from d0: partial sum j of
// dimension e is the chain fma(v_t[e], p_t, .) over the tokens t = j, j + 64, ... < simd_end,
// kept in registers, then stored to part[h][j][e] (row stride d).
template <int NH, int NV>
void ValueParts(const uint16_t* v_base, const int64_t* rows, int32_t simd_end, const float* probs,
                int64_t probs_stride, int d, int d0, float* parts, int64_t parts_stride) {
  const int32_t n_parts = simd_end < 64 ? simd_end : 64;
  for (int32_t j = 0; j < n_parts; ++j) {
    __m512 acc[NH][NV];
#pragma GCC unroll 8
    for (int h = 0; h < NH; ++h) {
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) acc[h][v] = _mm512_setzero_ps();
    }
    for (int32_t t = j; t < simd_end; t += 64) {
      const uint16_t* row = v_base + rows[t] + d0;
      __m512 vt[NV];
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) vt[v] = LoadF16x16(row + 16 * v);
#pragma GCC unroll 8
      for (int h = 0; h < NH; ++h) {
        const __m512 pt = _mm512_set1_ps(probs[h * probs_stride + t]);
#pragma GCC unroll 4
        for (int v = 0; v < NV; ++v) acc[h][v] = _mm512_fmadd_ps(vt[v], pt, acc[h][v]);
      }
    }
#pragma GCC unroll 8
    for (int h = 0; h < NH; ++h) {
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) {
        _mm512_storeu_ps(parts + h * parts_stride + j * d + d0 + 16 * v, acc[h][v]);
      }
    }
  }
}

template <int NV>
void ValuePartsHeads(const uint16_t* v_base, const int64_t* rows, int32_t simd_end,
                     const float* probs, int64_t probs_stride, int32_t group, int d, int d0,
                     float* parts, int64_t parts_stride) {
  constexpr int kHeads = 24 / NV < 6 ? 24 / NV : 6;  // accumulators in registers: at most 24
  int32_t g = 0;
  for (; g + kHeads <= group; g += kHeads) {
    ValueParts<kHeads, NV>(v_base, rows, simd_end, probs + g * probs_stride, probs_stride, d, d0,
                           parts + g * parts_stride, parts_stride);
  }
  // The remaining heads in one pass too, so that each V row is converted once for all of them
  // (GQA groups are often smaller than kHeads).
  auto rest = [&](auto heads) {
    ValueParts<decltype(heads)::value, NV>(v_base, rows, simd_end, probs + g * probs_stride,
                                           probs_stride, d, d0, parts + g * parts_stride,
                                           parts_stride);
  };
  static_assert(kHeads == 6, "the remainder below is 0..5 heads");
  switch (group - g) {
    case 1: rest(std::integral_constant<int, 1>()); break;
    case 2: rest(std::integral_constant<int, 2>()); break;
    case 3: rest(std::integral_constant<int, 3>()); break;
    case 4: rest(std::integral_constant<int, 4>()); break;
    case 5: rest(std::integral_constant<int, 5>()); break;
    default: break;
  }
}

void AttentionExactAvx512(const float* q, int32_t pos, int32_t kv_h, int32_t group,
                          const KvLayerView& kv, float scale, float* out, float* scratch) {
  const int d = kv.head_dim;
  const int32_t n = pos + 1;
  const int64_t n16 = (n + 15) / 16 * 16;
  float* probs = scratch;                  // [group][n16]
  float* parts = scratch + group * n16;    // [group][64][d]
  const int64_t parts_stride = 64 * static_cast<int64_t>(d);
  static thread_local std::vector<int64_t> rows;
  if (static_cast<int32_t>(rows.size()) < n) rows.resize(static_cast<size_t>(n));
  RowOffsets(kv, kv_h, n, rows.data());

  Scores(q, group, d, kv.k_base, rows.data(), n, scale, probs, n16);
  for (int32_t g = 0; g < group; ++g) Softmax(probs + g * n16, n);

  // kqv: tokens [0, simd_end) into 64 partial sums per dimension, the rest in f64.
  const int32_t window = (pos / 32 + 1) * 32;
  const int32_t simd_end = std::min(window & ~63, n);
  const int32_t n_parts = std::min(simd_end, 64);
  for (int d0 = 0; d0 < d; d0 += 64) {
    switch ((d - d0) >= 64 ? 4 : (d - d0) / 16) {
      case 1: ValuePartsHeads<1>(kv.v_base, rows.data(), simd_end, probs, n16, group, d, d0, parts, parts_stride); break;
      case 2: ValuePartsHeads<2>(kv.v_base, rows.data(), simd_end, probs, n16, group, d, d0, parts, parts_stride); break;
      case 3: ValuePartsHeads<3>(kv.v_base, rows.data(), simd_end, probs, n16, group, d, d0, parts, parts_stride); break;
      default: ValuePartsHeads<4>(kv.v_base, rows.data(), simd_end, probs, n16, group, d, d0, parts, parts_stride); break;
    }
  }
  for (int32_t g = 0; g < group; ++g) {
    const float* part = parts + g * parts_stride;
    const float* p = probs + g * n16;
    float* o = out + static_cast<int64_t>(g) * d;
    for (int j = 0; j < d; j += 16) {
      // Lane l of GGML's 4 accumulators is partial sum l, 16 + l, 32 + l, 48 + l.
      auto at = [&](int i) {
        return i < n_parts ? _mm512_loadu_ps(part + i * d + j) : _mm512_setzero_ps();
      };
      __m512 r[16];
      for (int l = 0; l < 16; ++l) {
        r[l] = _mm512_add_ps(_mm512_add_ps(at(l), at(32 + l)), _mm512_add_ps(at(16 + l), at(48 + l)));
      }
      // The lane tree of ReduceAdd16, for 16 dimensions at once.
      for (int l = 0; l < 8; ++l) r[l] = _mm512_add_ps(r[8 + l], r[l]);
      for (int l = 0; l < 4; ++l) r[l] = _mm512_add_ps(r[4 + l], r[l]);
      const __m512 total = _mm512_add_ps(_mm512_add_ps(r[0], r[2]), _mm512_add_ps(r[1], r[3]));
      __m512d lo = _mm512_cvtps_pd(_mm512_castps512_ps256(total));
      __m512d hi = _mm512_cvtps_pd(_mm512_extractf32x8_ps(total, 1));
      for (int32_t t = simd_end; t < n; ++t) {
        const __m512 prod = _mm512_mul_ps(LoadF16x16(kv.v_base + rows[t] + j), _mm512_set1_ps(p[t]));
        lo = _mm512_add_pd(lo, _mm512_cvtps_pd(_mm512_castps512_ps256(prod)));
        hi = _mm512_add_pd(hi, _mm512_cvtps_pd(_mm512_extractf32x8_ps(prod, 1)));
      }
      _mm512_storeu_ps(o + j, _mm512_insertf32x8(_mm512_castps256_ps512(_mm512_cvtpd_ps(lo)),
                                                 _mm512_cvtpd_ps(hi), 1));
    }
  }
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
  k->attention_exact = AttentionExactAvx512;
  k->silu_mul = SiluMulAvx512;
}

}  // namespace baton::kernels

#if defined(__clang__)
#pragma clang attribute pop
#endif
