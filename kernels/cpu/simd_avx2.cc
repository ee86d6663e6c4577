// The AVX2 + FMA + F16C level of the CPU kernels (see isa_kernels.h): the MatMul tiles of
// matmul_tiles.inc and super_block_tiles.inc with u8 x s8 dot products on vpmaddubsw + vpmaddwd,
// and the activation quantizers. Compiled for that instruction set with a target pragma; only
// called after run-time detection (cpu_isa.h).
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/cpu/interleaved_rows.h"
#include "kernels/cpu/isa_kernels.h"
#include "kernels/cpu/super_block_lanes.h"

// Everything below may use AVX2, FMA and F16C. All headers are included above, so no inline
// function with external linkage is compiled for this target.
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c"))), apply_to = function)
#else
#pragma GCC target("avx2,fma,f16c")
#endif

namespace baton::kernels {
namespace {

// 16 ymm registers. Float tiles: 4 x 3 accumulators, 3 converted weight vectors and one
// activation vector, which serves 3 FMAs (with 2 weight rows GCC folded the activation loads into
// the FMAs, two loads from L2 per two FMAs: F16 prefill 1.2x slower). Panels: 2 x 4.
constexpr int kTileA = 4;
constexpr int kTileW = 3;
constexpr int kDecodeW = 4;
constexpr int kPanelA = 2;
constexpr int kPanelW = 4;
// Super-block panel tiles: 3 x 2 int16 run sums and 3 x 2 int32 sums + operands.
constexpr int kSuperPanelA = 3;
// A dword's vpmaddubsw + vpmaddwd take two slots of the two pipes that multiply (Zen 3); a run
// summed in int16 takes one per dword. With 3 rows a tile, 2 threads, 512 activation rows, the
// fastest of six runs (from 2 rows and int32 sums): Q4_K 2048 x 2048 21.4 -> 11.3 ms, Q6_K
// 19.1 -> 16.5 ms; 576 x 1536 Q2_K 3.9 -> 3.1 ms, Q3_K 4.1 -> 2.6 ms.
constexpr bool kSumRunsInt16 = true;
// Lanes tiles: 4 x 3 accumulators + operands.
constexpr int kLanesTileA = 4;

#include "kernels/cpu/ordered_adds_avx2.inc"
#include "kernels/cpu/dot_u8s8_avx2.inc"

inline __m256i DotU8S8Acc(__m256i acc, __m256i u, __m256i s) {
  return _mm256_add_epi32(acc, DotU8S8(u, s));
}
inline __m256i DotI16Acc(__m256i acc, __m256i a, __m256i b) {
  return _mm256_add_epi32(acc, _mm256_madd_epi16(a, b));
}

#include "kernels/cpu/matmul_tiles.inc"
#include "kernels/cpu/super_block_tiles.inc"

// Quantizes 32 * n_groups values (n_groups of 4 vectors of 8) with one scale; writes the int8
// values, returns d and the sum of q; per-16 sums into bsums when not null. Bit-identical to
// QuantizeRowQ8_*Scalar: max |x| is exact, d and 127 / max|x| are the same scalar divisions,
// x * (127 / max|x|) the same multiplication and the conversion rounds to nearest even.
inline float QuantizeSpan(const float* x, int n_groups, int8_t* qs, int32_t* sum,
                          int16_t* bsums) {
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  __m256 amax = _mm256_setzero_ps();
  for (int k = 0; k < 8 * 4 * n_groups; k += 8) {
    amax = _mm256_max_ps(amax, _mm256_and_ps(_mm256_loadu_ps(x + k), abs_mask));
  }
  const float max_abs = HorizontalMax(amax);
  const float d = max_abs / 127.0f;
  const float id = d != 0.0f ? 127.0f / max_abs : 0.0f;
  const __m256 idv = _mm256_set1_ps(id);
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  __m256i total = _mm256_setzero_si256();
  for (int g = 0; g < n_groups; ++g) {
    const float* xg = x + 32 * g;
    const __m256i q0 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(xg), idv));
    const __m256i q1 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(xg + 8), idv));
    const __m256i q2 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(xg + 16), idv));
    const __m256i q3 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(xg + 24), idv));
    const __m256i s01 = _mm256_add_epi32(q0, q1);
    const __m256i s23 = _mm256_add_epi32(q2, q3);
    if (bsums != nullptr) {
      bsums[2 * g] = static_cast<int16_t>(HorizontalSumI32(s01));
      bsums[2 * g + 1] = static_cast<int16_t>(HorizontalSumI32(s23));
    }
    total = _mm256_add_epi32(total, _mm256_add_epi32(s01, s23));
    const __m256i p16 = _mm256_packs_epi16(_mm256_packs_epi32(q0, q1), _mm256_packs_epi32(q2, q3));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(qs + 32 * g),
                        _mm256_permutevar8x32_epi32(p16, order));
  }
  *sum = HorizontalSumI32(total);
  return d;
}

void QuantizeRowQ8_1Avx2(const float* x, int64_t n_cols, int8_t* qs, float* d, float* s) {
  for (int64_t b = 0; b < n_cols / 32; ++b) {
    int32_t sum;
    d[b] = QuantizeSpan(x + 32 * b, 1, qs + 32 * b, &sum, nullptr);
    s[b] = d[b] * static_cast<float>(sum);
  }
}

void RoundToF16Avx2(float* v, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(v + i), _MM_FROUND_TO_NEAREST_INT);
    _mm256_storeu_ps(v + i, _mm256_cvtph_ps(h));
  }
  if (i < n) {  // the tail through the same lanes
    alignas(32) float t[8] = {};
    std::memcpy(t, v + i, (n - i) * sizeof(float));
    _mm256_store_ps(t, _mm256_cvtph_ps(_mm256_cvtps_ph(_mm256_load_ps(t), _MM_FROUND_TO_NEAREST_INT)));
    std::memcpy(v + i, t, (n - i) * sizeof(float));
  }
}

// F32ToF16 of 8 values: F16C's rounding (to nearest even; overflow to inf, f16 subnormals and
// zeros as F32ToF16 gives them), NaNs made F32ToF16's quiet NaN (sign | 0x7e00).
inline __m128i ToF16x8(__m256 v) {
  const __m128i h = _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT);
  const __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q));
  const __m128i nan16 =
      _mm_packs_epi32(_mm256_castsi256_si128(nan), _mm256_extracti128_si256(nan, 1));
  const __m128i quiet =
      _mm_or_si128(_mm_and_si128(h, _mm_set1_epi16(-0x8000)), _mm_set1_epi16(0x7e00));
  return _mm_blendv_epi8(h, quiet, nan16);
}

void ToF16RowAvx2(const float* x, int64_t n, uint16_t* out) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), ToF16x8(_mm256_loadu_ps(x + i)));
  }
  if (i < n) {  // the tail through the same lanes
    alignas(32) float t[8] = {};
    alignas(16) uint16_t h[8];
    std::memcpy(t, x + i, (n - i) * sizeof(float));
    _mm_store_si128(reinterpret_cast<__m128i*>(h), ToF16x8(_mm256_load_ps(t)));
    std::memcpy(out + i, h, (n - i) * sizeof(uint16_t));
  }
}

void QuantizeRowQ8_KAvx2(const float* x, int64_t n_cols, int8_t* qs, float* d, int16_t* bsums) {
  for (int64_t b = 0; b < n_cols / 256; ++b) {
    int32_t sum;
    d[b] = QuantizeSpan(x + 256 * b, 8, qs + 256 * b, &sum, bsums + 16 * b);
  }
}

}  // namespace

void FillAvx2Kernels(IsaKernels* k) {
  k->isa = CpuIsa::kAvx2;
  k->matmul_f32 = MatMulRows<FloatKernel<FormatF32>>;
  k->matmul_f16 = MatMulRows<FloatKernel<FormatF16>>;
  k->matmul_bf16 = MatMulRows<FloatKernel<FormatBF16>>;
  k->matmul_q4_0 = PanelMatMulRows<Block32Kernel<FormatQ4_0>>;
  k->matmul_q4_1 = PanelMatMulRows<Block32Kernel<FormatQ4_1>>;
  k->matmul_q8_0 = PanelMatMulRows<Block32Kernel<FormatQ8_0>>;
  k->matmul_q5_0 = PanelMatMulRows<Block32Kernel<FormatQ5_0>>;
  k->matmul_q5_1 = PanelMatMulRows<Block32Kernel<FormatQ5_1>>;
  k->matmul_q4_k = SuperBlockMatMulRows<FormatQ4_K>;
  k->matmul_q5_k = SuperBlockMatMulRows<FormatQ5_K>;
  k->matmul_q6_k = SuperBlockMatMulRows<FormatQ6_K>;
  k->matmul_q2_k = SuperBlockMatMulRows<FormatQ2_K>;
  k->matmul_q3_k = SuperBlockMatMulRows<FormatQ3_K>;
  k->quantize_q8_1 = QuantizeRowQ8_1Avx2;
  k->quantize_q8_k = QuantizeRowQ8_KAvx2;
  k->round_to_f16 = RoundToF16Avx2;
  k->to_f16_row = ToF16RowAvx2;
  FillPackedAvx2Kernels(k);
  FillAvx2AttentionKernels(k);
  FillAvx2ElementwiseKernels(k);
}

}  // namespace baton::kernels

#if defined(__clang__)
#pragma clang attribute pop
#endif
