// What the kernels' per-lane logic (mma_warp_tile.h, flash_attention_warp.h, weight_chunks.cuh)
// shares, for the GPU and for the CPU tests that run it: loads from device memory (read-only
// cached on the GPU), f16 conversions, and the Q4_K / Q5_K scale decode. Plain C++ under a
// host compiler; CUDA's intrinsics under nvcc's device pass. Thread-safety: pure functions.
#ifndef BATON_KERNELS_CUDA_LANE_PRIMITIVES_H_
#define BATON_KERNELS_CUDA_LANE_PRIMITIVES_H_

#include <cmath>
#include <cstdint>
#include <cstring>

#include "kernels/half.h"
#include "kernels/host_device.h"

#if defined(__CUDACC__)
#include <cuda_fp16.h>
#endif

namespace baton::kernels::cuda {

// Four bytes at p (4-byte aligned) as one word, lowest address lowest.
BATON_HOST_DEVICE inline uint32_t LoadWord(const void* p) {
#if defined(__CUDA_ARCH__)
  return __ldg(static_cast<const unsigned int*>(p));
#else
  uint32_t word;
  std::memcpy(&word, p, sizeof word);
  return word;
#endif
}

// The f16 at p (2-byte aligned), its raw bits.
BATON_HOST_DEVICE inline uint16_t LoadHalfBits(const void* p) {
#if defined(__CUDA_ARCH__)
  return __ldg(static_cast<const unsigned short*>(p));
#else
  uint16_t bits;
  std::memcpy(&bits, p, sizeof bits);
  return bits;
#endif
}

BATON_HOST_DEVICE inline float HalfBitsToFloat(uint16_t bits) {
#if defined(__CUDA_ARCH__)
  return __half2float(__ushort_as_half(bits));
#else
  return F16ToF32(bits);
#endif
}

// The f16 at p as f32.
BATON_HOST_DEVICE inline float LoadHalf(const void* p) { return HalfBitsToFloat(LoadHalfBits(p)); }

// Two f32 as f16 (round to nearest even) in one register, a in the low half.
BATON_HOST_DEVICE inline uint32_t PackHalves(float a, float b) {
#if defined(__CUDA_ARCH__)
  return static_cast<uint32_t>(__half_as_ushort(__float2half_rn(a))) |
         (static_cast<uint32_t>(__half_as_ushort(__float2half_rn(b))) << 16);
#else
  return static_cast<uint32_t>(F32ToF16(a)) | (static_cast<uint32_t>(F32ToF16(b)) << 16);
#endif
}

BATON_HOST_DEVICE inline float ExpOf(float x) {
#if defined(__CUDA_ARCH__)
  return __expf(x);
#else
  return std::exp(x);
#endif
}

// The 6-bit scale and min of sub-block j of a Q4_K / Q5_K super-block (12 packed bytes).
BATON_HOST_DEVICE inline void ScaleMinK4(const uint8_t* packed, int j, int* scale, int* min) {
  if (j < 4) {
    *scale = packed[j] & 63;
    *min = packed[j + 4] & 63;
  } else {
    *scale = (packed[j + 4] & 0x0f) | ((packed[j - 4] >> 6) << 4);
    *min = (packed[j + 4] >> 4) | ((packed[j] >> 6) << 4);
  }
}

}  // namespace baton::kernels::cuda

#endif  // BATON_KERNELS_CUDA_LANE_PRIMITIVES_H_
