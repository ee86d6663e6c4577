#include "kernels/half.h"

#include <cstdint>
#include <cstring>

// Bit-level conversions. They agree bit for bit with GGML's reference conversions: f16 -> f32 is
// exact (NaNs come out quiet, payload kept); f32 -> f16 rounds to nearest even, overflows to inf,
// produces f16 subnormals where due, and turns every NaN into the canonical quiet NaN 0x7e00 (sign
// kept); f32 -> bf16 rounds to nearest even (subnormals included) and keeps NaN payloads, quieted.

namespace baton::kernels {
namespace {

uint32_t FloatBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

float BitsFloat(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// Shifts `m` right by `shift` (1..31) rounding to nearest, ties to even.
uint32_t ShiftRightRoundEven(uint32_t m, int shift) {
  const uint32_t kept = m >> shift;
  const uint32_t rest = m & ((uint32_t{1} << shift) - 1);
  const uint32_t half = uint32_t{1} << (shift - 1);
  if (rest > half || (rest == half && (kept & 1) != 0)) return kept + 1;
  return kept;
}

}  // namespace

float F16ToF32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1fu;
  uint32_t mantissa = h & 0x3ffu;
  if (exponent == 0x1f) {  // inf or NaN; NaNs come out quiet, like the hardware conversions
    const uint32_t quiet = mantissa != 0 ? 0x00400000u : 0u;
    return BitsFloat(sign | 0x7f800000u | quiet | (mantissa << 13));
  }
  if (exponent != 0) {
    return BitsFloat(sign | ((exponent + (127 - 15)) << 23) | (mantissa << 13));
  }
  if (mantissa == 0) return BitsFloat(sign);
  // Subnormal: mantissa * 2^-24. Normalize so that the leading 1 lands on bit 10.
  int e = 1 - 15;
  while ((mantissa & 0x400u) == 0) {
    mantissa <<= 1;
    --e;
  }
  mantissa &= 0x3ffu;
  return BitsFloat(sign | (static_cast<uint32_t>(e + 127) << 23) | (mantissa << 13));
}

uint16_t F32ToF16(float f) {
  const uint32_t bits = FloatBits(f);
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  const uint32_t magnitude = bits & 0x7fffffffu;
  if (magnitude > 0x7f800000u) return sign | 0x7e00u;      // NaN
  if (magnitude == 0x7f800000u) return sign | 0x7c00u;     // inf
  const int exponent = static_cast<int>(magnitude >> 23);  // biased by 127
  const uint32_t mantissa = magnitude & 0x7fffffu;
  const int half_exponent = exponent - 127 + 15;
  if (half_exponent >= 0x1f) return sign | 0x7c00u;  // too large even before rounding
  if (half_exponent >= 1) {
    // Normal f16. A carry out of the mantissa bumps the exponent (up to inf): that is correct.
    const uint32_t h = (static_cast<uint32_t>(half_exponent) << 10) | (mantissa >> 13);
    const uint32_t rest = mantissa & 0x1fffu;
    const uint32_t rounded = (rest > 0x1000u || (rest == 0x1000u && (h & 1) != 0)) ? h + 1 : h;
    return static_cast<uint16_t>(sign | rounded);
  }
  // f16 subnormal or zero: the value is (1.mantissa) * 2^(exponent-127), in units of 2^-24.
  if (exponent == 0) return sign;    // f32 subnormals are far below half of the smallest f16
  const int shift = 126 - exponent;  // >= 14 here
  if (shift > 24) return sign;       // below half of the smallest f16 subnormal
  const uint32_t full = mantissa | 0x800000u;
  return static_cast<uint16_t>(sign | ShiftRightRoundEven(full, shift));
}

uint16_t F32ToBF16(float f) {
  const uint32_t bits = FloatBits(f);
  if ((bits & 0x7fffffffu) > 0x7f800000u) {
    return static_cast<uint16_t>((bits >> 16) | 0x40u);  // NaN: keep the top payload bits, quiet
  }
  // Round to nearest even on the 16 dropped bits (the sign rides along in the kept bits); a carry
  // out of the largest finite values reaches inf, which is right.
  return static_cast<uint16_t>(ShiftRightRoundEven(bits, 16));
}

}  // namespace baton::kernels
