// The codebooks of GGML's i-quant weight types (iq_grids.cc, generated from llama.cpp's
// ggml-common.h by scripts/reference/extract_iq_grids.py) and the small value tables of IQ4 and
// MXFP4. Each grid entry packs 8 (IQ3: 4) one-byte values, first value in the lowest byte: u8
// magnitudes for IQ2 / IQ3 (signs are stored apart), i8 values -1, 0, 1 for IQ1.
//
// Thread-safety: constant data.
#ifndef BATON_KERNELS_CPU_IQ_GRIDS_H_
#define BATON_KERNELS_CPU_IQ_GRIDS_H_

#include <cstdint>

namespace baton::kernels::iq {

extern const uint64_t kIQ2XXSGrid[256];
extern const uint64_t kIQ2XSGrid[512];
extern const uint64_t kIQ2SGrid[1024];
extern const uint32_t kIQ3XXSGrid[256];
extern const uint32_t kIQ3SGrid[512];
extern const uint64_t kIQ1SGrid[2048];

// IQ4_NL's and IQ4_XS's 16 non-linear levels.
inline constexpr int8_t kIQ4Values[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                          1,    13,   25,  38,  53,  69,  89,  113};
// MXFP4's E2M1 values, doubled (the block scale is halved to match).
inline constexpr int8_t kMXFP4Values[16] = {0, 1,  2,  3,  4,  6,  8,  12,
                                            0, -1, -2, -3, -4, -6, -8, -12};
// IQ1_S's and IQ1_M's offset of every grid value, its sign chosen per 8 values.
inline constexpr float kIQ1Delta = 0.125f;

// The 8 signs of 8 values from 7 stored bits: bit j set means value j is negative; the eighth
// sign makes the count of negatives even.
constexpr uint8_t SignsOf7BitsSlow(uint32_t bits) {
  bits &= 127;
  uint32_t parity = 0;
  for (uint32_t b = bits; b != 0; b >>= 1) parity ^= b & 1;
  return static_cast<uint8_t>(bits | (parity << 7));
}
struct SignTable {
  uint8_t signs[128];
  constexpr SignTable() : signs() {
    for (uint32_t i = 0; i < 128; ++i) signs[i] = SignsOf7BitsSlow(i);
  }
};
inline constexpr SignTable kSigns;
inline uint8_t SignsOf7Bits(uint32_t bits) { return kSigns.signs[bits & 127]; }

}  // namespace baton::kernels::iq

#endif  // BATON_KERNELS_CPU_IQ_GRIDS_H_
