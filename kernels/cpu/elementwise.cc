#include "kernels/cpu/elementwise.h"

#include <cmath>
#include <cstdint>
#include <cstring>

namespace baton::kernels {

void AddScalar(float* x, const float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] += y[i];
}

void RoundToF16UnboundedScalar(float* v, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    uint32_t bits;
    std::memcpy(&bits, &v[i], sizeof bits);
    uint32_t biased = (bits >> 23) & 0xffu;
    biased = biased < 113u ? 113u : biased;  // 113 = 127 - 14
    const uint32_t magic_bits = ((biased + 13u) << 23) | 0x400000u;
    float magic;
    std::memcpy(&magic, &magic_bits, sizeof magic);
    v[i] = (v[i] + magic) - magic;
  }
}

float RmsNormScale(double (&lanes)[8], int64_t dim, float eps) {
  for (int width = 4; width > 0; width /= 2) {
    for (int l = 0; l < width; ++l) lanes[l] += lanes[l + width];
  }
  const float mean = static_cast<float>(lanes[0] / static_cast<double>(dim));
  return 1.0f / std::sqrt(mean + eps);
}

void RmsNormRowScalar(const float* x, const float* weight, int64_t dim, float eps, float* y) {
  double lanes[8] = {};
  for (int64_t j = 0; j < dim; ++j) lanes[j % 8] += static_cast<double>(x[j] * x[j]);
  const float scale = RmsNormScale(lanes, dim, eps);
  for (int64_t j = 0; j < dim; ++j) y[j] = (x[j] * scale) * weight[j];
}

}  // namespace baton::kernels
