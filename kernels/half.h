// IEEE half (f16) and bfloat16 <-> f32 conversions, bit-exact with GGML's reference conversions
// (round to nearest even; NaN stays NaN). Pure functions, safe from any thread; the f32 -> f16/bf16
// and f16 -> f32 conversions live in half.cc.
#ifndef BATON_KERNELS_HALF_H_
#define BATON_KERNELS_HALF_H_

#include <cstdint>
#include <cstring>

namespace baton::kernels {

float F16ToF32(uint16_t h);
uint16_t F32ToF16(float f);

inline float BF16ToF32(uint16_t h) {
  uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

uint16_t F32ToBF16(float f);

}  // namespace baton::kernels

#endif  // BATON_KERNELS_HALF_H_
