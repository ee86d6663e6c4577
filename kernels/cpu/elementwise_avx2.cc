// The element-wise operations (elementwise.h) at the AVX2 level: 8 values a vector, the same bits
// as the portable definitions.
#include <immintrin.h>

#include <cstdint>

#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/isa_kernels.h"

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c"))), apply_to = function)
#else
#pragma GCC target("avx2,fma,f16c")
#endif

namespace baton::kernels {
namespace {

void AddAvx2(float* x, const float* y, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(x + i, _mm256_add_ps(_mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
  }
  AddScalar(x + i, y + i, n - i);
}

void RoundToF16UnboundedAvx2(float* v, int64_t n) {
  const __m256i exponent_mask = _mm256_set1_epi32(0xff);
  const __m256i smallest_normal = _mm256_set1_epi32(113);
  const __m256i half_bit = _mm256_set1_epi32(0x400000);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 x = _mm256_loadu_ps(v + i);
    __m256i biased = _mm256_and_si256(_mm256_srli_epi32(_mm256_castps_si256(x), 23), exponent_mask);
    biased = _mm256_max_epu32(biased, smallest_normal);
    const __m256 magic = _mm256_castsi256_ps(_mm256_or_si256(
        _mm256_slli_epi32(_mm256_add_epi32(biased, _mm256_set1_epi32(13)), 23), half_bit));
    _mm256_storeu_ps(v + i, _mm256_sub_ps(_mm256_add_ps(x, magic), magic));
  }
  RoundToF16UnboundedScalar(v + i, n - i);
}

// Lanes 0-3 in `low`, 4-7 in `high`: the square of value j goes to lane j % 8, as in the
// definition.
void RmsNormRowAvx2(const float* x, const float* weight, int64_t dim, float eps, float* y) {
  __m256d low = _mm256_setzero_pd();
  __m256d high = _mm256_setzero_pd();
  int64_t j = 0;
  for (; j + 8 <= dim; j += 8) {
    const __m256 v = _mm256_loadu_ps(x + j);
    const __m256 square = _mm256_mul_ps(v, v);
    low = _mm256_add_pd(low, _mm256_cvtps_pd(_mm256_castps256_ps128(square)));
    high = _mm256_add_pd(high, _mm256_cvtps_pd(_mm256_extractf128_ps(square, 1)));
  }
  double lanes[8];
  _mm256_storeu_pd(lanes, low);
  _mm256_storeu_pd(lanes + 4, high);
  for (int l = 0; j + l < dim; ++l) lanes[l] += static_cast<double>(x[j + l] * x[j + l]);
  const float scale = RmsNormScale(lanes, dim, eps);
  const __m256 scale8 = _mm256_set1_ps(scale);
  for (j = 0; j + 8 <= dim; j += 8) {
    const __m256 scaled = _mm256_mul_ps(_mm256_loadu_ps(x + j), scale8);
    _mm256_storeu_ps(y + j, _mm256_mul_ps(scaled, _mm256_loadu_ps(weight + j)));
  }
  for (; j < dim; ++j) y[j] = (x[j] * scale) * weight[j];
}

}  // namespace

void FillAvx2ElementwiseKernels(IsaKernels* k) {
  k->add = AddAvx2;
  k->round_to_f16_unbounded = RoundToF16UnboundedAvx2;
  k->rms_norm_row = RmsNormRowAvx2;
}

}  // namespace baton::kernels

#if defined(__clang__)
#pragma clang attribute pop
#endif
