// Reads of the little-endian fields of quantized blocks, which lie at any alignment in a
// mapped file (memcpy, never a cast), on a little-endian host (x86-64, aarch64: every one baton
// builds for).
//
// Thread-safety: pure functions.
#ifndef BATON_KERNELS_CPU_BLOCK_BYTES_H_
#define BATON_KERNELS_CPU_BLOCK_BYTES_H_

#include <cstdint>
#include <cstring>

#include "kernels/half.h"

namespace baton::kernels {

template <typename T>
T ReadUnaligned(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

inline float ReadF16(const uint8_t* p) { return F16ToF32(ReadUnaligned<uint16_t>(p)); }
inline float ReadF32(const uint8_t* p) { return ReadUnaligned<float>(p); }
inline uint16_t ReadU16(const uint8_t* p) { return ReadUnaligned<uint16_t>(p); }
inline uint32_t ReadU32(const uint8_t* p) { return ReadUnaligned<uint32_t>(p); }

}  // namespace baton::kernels

#endif  // BATON_KERNELS_CPU_BLOCK_BYTES_H_
