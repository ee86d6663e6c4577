#include "kernels/cpu/iquant_blocks.h"

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <optional>

#include "absl/log/check.h"
#include "kernels/cpu/block_bytes.h"
#include "kernels/cpu/iq_grids.h"
#include "kernels/cpu/quantize.h"
#include "kernels/half.h"

// One function per GGML block layout (ggml-common.h's block_iq*, block_mxfp4), each walking the
// 32-value groups of a block. Scales are computed and values multiplied in GGML's order: the
// group scale first (d times the stored sub-scale), then the grid value, then the sign.

namespace baton::kernels {
namespace {

// Byte j of a grid entry.
template <typename T>
uint8_t GridByte(T entry, int j) {
  return static_cast<uint8_t>(entry >> (8 * j));
}

// v with the sign bit j of signs (GGML multiplies by -1 or 1: the same, NaN aside, as flipping
// the sign bit).
float Signed(float v, uint8_t signs, int j) {
  return std::bit_cast<float>(std::bit_cast<uint32_t>(v) ^ (uint32_t{(signs >> j) & 1u} << 31));
}

// 8 values db * |grid| with the signs' bits.
void WriteSigned8(float db, uint64_t grid, uint8_t signs, float* y) {
  for (int j = 0; j < 8; ++j) y[j] = Signed(db * static_cast<float>(GridByte(grid, j)), signs, j);
}

// 4 + 4 values from two 4-value IQ3 grid entries, signs bits 0..3 and 4..7.
void WriteSigned4x2(float db, uint32_t grid1, uint32_t grid2, uint8_t signs, float* y) {
  for (int j = 0; j < 4; ++j) {
    y[j] = Signed(db * static_cast<float>(GridByte(grid1, j)), signs, j);
    y[j + 4] = Signed(db * static_cast<float>(GridByte(grid2, j)), signs, j + 4);
  }
}

// 8 values dl * (grid + delta), the grid's bytes signed (IQ1).
void WriteIQ1(float dl, float delta, uint64_t grid, float* y) {
  for (int j = 0; j < 8; ++j) {
    y[j] = dl * (static_cast<float>(static_cast<int8_t>(GridByte(grid, j))) + delta);
  }
}

// The IQ2 scale of 4-bit sub-scale s: d * (s + 1/2) / 4.
float IQ2Scale(float d, uint32_t s) { return d * (0.5f + static_cast<float>(s)) * 0.25f; }

// IQ2_XXS (66 bytes): f16 d; u16 qs[32]. Group g's 8 bytes: 4 grid indices, then a u32 of four
// 7-bit sign fields and, in its top 4 bits, the sub-scale.
void IQ2_XXS(const uint8_t* b, float* y) {
  const float d = ReadF16(b);
  for (int g = 0; g < 8; ++g, y += 32) {
    const uint8_t* q = b + 2 + 8 * g;
    const uint32_t aux = ReadU32(q + 4);
    const float db = IQ2Scale(d, aux >> 28);
    for (int l = 0; l < 4; ++l) {
      WriteSigned8(db, iq::kIQ2XXSGrid[q[l]], iq::SignsOf7Bits(aux >> (7 * l)), y + 8 * l);
    }
  }
}

// IQ2_XS (74 bytes): f16 d; u16 qs[32] (9-bit grid index, 7 sign bits); u8 scales[8] (two 4-bit
// sub-scales per group, one per 16 values).
void IQ2_XS(const uint8_t* b, float* y) {
  const float d = ReadF16(b);
  for (int g = 0; g < 8; ++g, y += 32) {
    const uint8_t scales = b[66 + g];
    const float db[2] = {IQ2Scale(d, scales & 0xf), IQ2Scale(d, scales >> 4)};
    for (int l = 0; l < 4; ++l) {
      const uint16_t q = ReadU16(b + 2 + 2 * (4 * g + l));
      WriteSigned8(db[l / 2], iq::kIQ2XSGrid[q & 511], iq::SignsOf7Bits(q >> 9), y + 8 * l);
    }
  }
}

// IQ2_S (82 bytes): f16 d; u8 qs[32] (grid index low bits), u8 signs[32]; u8 qh[8] (two high
// index bits per 8 values); u8 scales[8] (as IQ2_XS).
void IQ2_S(const uint8_t* b, float* y) {
  const float d = ReadF16(b);
  const uint8_t* qs = b + 2;
  const uint8_t* signs = b + 2 + 32;
  const uint8_t* qh = b + 66;
  for (int g = 0; g < 8; ++g, y += 32, qs += 4, signs += 4) {
    const uint8_t scales = b[74 + g];
    const float db[2] = {IQ2Scale(d, scales & 0xf), IQ2Scale(d, scales >> 4)};
    for (int l = 0; l < 4; ++l) {
      const uint32_t index = qs[l] | ((qh[g] << (8 - 2 * l)) & 0x300);
      WriteSigned8(db[l / 2], iq::kIQ2SGrid[index], signs[l], y + 8 * l);
    }
  }
}

// IQ3_XXS (98 bytes): f16 d; u8 qs[64] (grid indices, 4 values each); then per group a u32 of
// four 7-bit sign fields and the 4-bit sub-scale on top.
void IQ3_XXS(const uint8_t* b, float* y) {
  const float d = ReadF16(b);
  const uint8_t* qs = b + 2;
  for (int g = 0; g < 8; ++g, y += 32, qs += 8) {
    const uint32_t aux = ReadU32(b + 2 + 64 + 4 * g);
    const float db = d * (0.5f + static_cast<float>(aux >> 28)) * 0.5f;
    for (int l = 0; l < 4; ++l) {
      WriteSigned4x2(db, iq::kIQ3XXSGrid[qs[2 * l]], iq::kIQ3XXSGrid[qs[2 * l + 1]],
                     iq::SignsOf7Bits(aux >> (7 * l)), y + 8 * l);
    }
  }
}

// IQ3_S (110 bytes): f16 d; u8 qs[64] (grid index low bits); u8 qh[8] (the ninth bits); u8
// signs[32]; u8 scales[4] (two 4-bit sub-scales, one per group, d * (1 + 2 s)).
void IQ3_S(const uint8_t* b, float* y) {
  const float d = ReadF16(b);
  const uint8_t* qs = b + 2;
  const uint8_t* signs = b + 74;
  for (int g = 0; g < 8; ++g, y += 32, qs += 8, signs += 4) {
    const uint32_t s = (b[106 + g / 2] >> (4 * (g % 2))) & 0xf;
    const float db = d * static_cast<float>(1 + 2 * s);
    const uint32_t qh = b[66 + g];
    for (int l = 0; l < 4; ++l) {
      const uint32_t i1 = qs[2 * l] | ((qh << (8 - 2 * l)) & 256);
      const uint32_t i2 = qs[2 * l + 1] | ((qh << (7 - 2 * l)) & 256);
      WriteSigned4x2(db, iq::kIQ3SGrid[i1], iq::kIQ3SGrid[i2], signs[l], y + 8 * l);
    }
  }
}

// IQ1_S (50 bytes): f16 d; u8 qs[32] (grid index low bits); u16 qh[8]: per group three high
// index bits per 8 values, a 3-bit sub-scale (bits 12..14) and the delta's sign (bit 15).
void IQ1_S(const uint8_t* b, float* y) {
  const float d = ReadF16(b);
  const uint8_t* qs = b + 2;
  for (int g = 0; g < 8; ++g, y += 32, qs += 4) {
    const uint32_t qh = ReadU16(b + 34 + 2 * g);
    const float dl = d * static_cast<float>(2 * ((qh >> 12) & 7) + 1);
    const float delta = (qh & 0x8000) ? -iq::kIQ1Delta : iq::kIQ1Delta;
    for (int l = 0; l < 4; ++l) {
      WriteIQ1(dl, delta, iq::kIQ1SGrid[qs[l] | (((qh >> (3 * l)) & 7) << 8)], y + 8 * l);
    }
  }
}

// IQ1_M (56 bytes): u8 qs[32] (grid index low bits); u8 qh[16] (per 8 values three high index
// bits and the delta's sign); u16 scales[4]: 3-bit sub-scales, one per 16 values, and in their
// top nibbles the f16 d.
void IQ1_M(const uint8_t* b, float* y) {
  uint16_t sc[4];
  std::memcpy(sc, b + 48, sizeof sc);
  const uint16_t d_bits = static_cast<uint16_t>((sc[0] >> 12) | ((sc[1] >> 8) & 0x00f0) |
                                                ((sc[2] >> 4) & 0x0f00) | (sc[3] & 0xf000));
  const float d = F16ToF32(d_bits);
  const uint8_t* qs = b;
  const uint8_t* qh = b + 32;
  for (int g = 0; g < 8; ++g, y += 32, qs += 4, qh += 2) {
    const int shift = 6 * (g % 2);
    const float dl[2] = {d * static_cast<float>(2 * ((sc[g / 2] >> shift) & 7) + 1),
                         d * static_cast<float>(2 * ((sc[g / 2] >> (shift + 3)) & 7) + 1)};
    for (int l = 0; l < 4; ++l) {
      const uint32_t h = qh[l / 2] >> (4 * (l % 2));  // this 8 values' nibble of qh
      const uint32_t index = qs[l] | ((h & 7) << 8);
      const float delta = (h & 8) ? -iq::kIQ1Delta : iq::kIQ1Delta;
      WriteIQ1(dl[l / 2], delta, iq::kIQ1SGrid[index], y + 8 * l);
    }
  }
}

// 16 bytes of nibbles into 32 values: the low nibbles first, then the high ones.
void WriteNibbles(float d, const int8_t* levels, const uint8_t* qs, float* y) {
  for (int j = 0; j < 16; ++j) {
    y[j] = d * static_cast<float>(levels[qs[j] & 0xf]);
    y[j + 16] = d * static_cast<float>(levels[qs[j] >> 4]);
  }
}

// IQ4_NL (18 bytes): f16 d; u8 qs[16], level indices.
void IQ4_NL(const uint8_t* b, float* y) { WriteNibbles(ReadF16(b), iq::kIQ4Values, b + 2, y); }

// IQ4_XS (136 bytes): f16 d; u16 scales_h (2 high bits per group); u8 scales_l[4] (4 low bits);
// u8 qs[128]. Group g's scale is d * (s - 32) for its 6-bit s.
void IQ4_XS(const uint8_t* b, float* y) {
  const float d = ReadF16(b);
  const uint32_t scales_h = ReadU16(b + 2);
  for (int g = 0; g < 8; ++g, y += 32) {
    const int s = ((b[4 + g / 2] >> (4 * (g % 2))) & 0xf) | (((scales_h >> (2 * g)) & 3) << 4);
    WriteNibbles(d * static_cast<float>(s - 32), iq::kIQ4Values, b + 8 + 16 * g, y);
  }
}

// MXFP4 (17 bytes): u8 e, the block scale 2^(e - 127), halved to match the doubled levels; u8
// qs[16]. Values level * scale (level first, as GGML multiplies).
void MXFP4(const uint8_t* b, float* y) {
  const uint32_t e = b[0];
  const uint32_t bits = e < 2 ? (0x00200000u << e) : ((e - 1) << 23);
  const float d = std::bit_cast<float>(bits);
  for (int j = 0; j < 16; ++j) {
    y[j] = static_cast<float>(iq::kMXFP4Values[b[1 + j] & 0xf]) * d;
    y[j + 16] = static_cast<float>(iq::kMXFP4Values[b[1 + j] >> 4]) * d;
  }
}

using BlockFn = void (*)(const uint8_t*, float*);

BlockFn BlockFnFor(DType dtype) {
  switch (dtype) {
    case DType::kIQ2_XXS:
      return IQ2_XXS;
    case DType::kIQ2_XS:
      return IQ2_XS;
    case DType::kIQ2_S:
      return IQ2_S;
    case DType::kIQ3_XXS:
      return IQ3_XXS;
    case DType::kIQ3_S:
      return IQ3_S;
    case DType::kIQ1_S:
      return IQ1_S;
    case DType::kIQ1_M:
      return IQ1_M;
    case DType::kIQ4_NL:
      return IQ4_NL;
    case DType::kIQ4_XS:
      return IQ4_XS;
    case DType::kMXFP4:
      return MXFP4;
    default:
      return nullptr;
  }
}

// ---- Q8_0 forms (iquant_blocks.h) ----

constexpr int kQ8_0Bytes = 34;

// The scale of 32-value group g of block b: its values are the scale times integers of at most
// 127 in magnitude, exactly (each a product of few enough bits for f32). nullopt for the types
// whose groups have two scales, one per 16 values (IQ2_XS, IQ2_S, IQ1_M).
std::optional<float> GroupScale(DType dtype, const uint8_t* b, int g) {
  switch (dtype) {
    case DType::kIQ2_XXS:  // times the grid's 8, 25, 43
      return IQ2Scale(ReadF16(b), ReadU32(b + 2 + 8 * g + 4) >> 28);
    case DType::kIQ3_XXS:  // times the grid's 4..62
      return ReadF16(b) * (0.5f + static_cast<float>(ReadU32(b + 66 + 4 * g) >> 28)) * 0.5f;
    case DType::kIQ3_S:  // times the grid's 1..15
      return ReadF16(b) * static_cast<float>(1 + 2 * ((b[106 + g / 2] >> (4 * (g % 2))) & 0xf));
    case DType::kIQ1_S: {  // (g + delta) is 1/8 of -9, -7, -1, 1, 7, 9
      const uint32_t qh = ReadU16(b + 34 + 2 * g);
      return ReadF16(b) * static_cast<float>(2 * ((qh >> 12) & 7) + 1) / 8.0f;
    }
    case DType::kIQ4_NL:  // times the levels -127..113
      return ReadF16(b);
    case DType::kIQ4_XS: {
      const int s =
          ((b[4 + g / 2] >> (4 * (g % 2))) & 0xf) | (((ReadU16(b + 2) >> (2 * g)) & 3) << 4);
      return ReadF16(b) * static_cast<float>(s - 32);
    }
    case DType::kMXFP4:  // 2^(e - 128) times the doubled E2M1 levels (at most 12), as 8 x 1/8
      return std::ldexp(1.0f, static_cast<int>(b[0]) - 131);
    default:
      return std::nullopt;
  }
}

// One block's Q8_0 form: each group's integers under its scale rounded to f16, or, for the types
// with two scales a group, its values requantized (QuantizeRow's Q8_0).
void BlockToQ8_0(DType dtype, const uint8_t* b, uint8_t* out) {
  const DTypeTraits& t = Traits(dtype);
  float values[256];
  BlockFnFor(dtype)(b, values);
  if (!GroupScale(dtype, b, 0).has_value()) {
    QuantizeRow(DType::kQ8_0, values, t.block_size, out);
    return;
  }
  for (int g = 0; g < t.block_size / 32; ++g, out += kQ8_0Bytes) {
    const float scale = *GroupScale(dtype, b, g);
    const uint16_t scale_f16 = F32ToF16(scale);
    std::memcpy(out, &scale_f16, sizeof scale_f16);
    // The quotients are integers: times the reciprocal, then rounded, they come out exact. A
    // scale of infinity or NaN (a damaged file's) gives zeros, not an undefined conversion.
    const float inverse = scale == 0.0f ? 0.0f : 1.0f / scale;
    for (int j = 0; j < 32; ++j) {
      const float q = values[32 * g + j] * inverse;
      const float rounded = q + (q >= 0.0f ? 0.5f : -0.5f);
      const bool in_range = rounded > -128.0f && rounded < 128.0f;  // false for NaN
      out[2 + j] = static_cast<uint8_t>(static_cast<int8_t>(in_range ? rounded : 0.0f));
    }
  }
}

}  // namespace

bool IsIQuantOrMxfp4(DType dtype) { return BlockFnFor(dtype) != nullptr; }

void DequantizeIQuantBlocks(DType dtype, const uint8_t* src, float* dst, int64_t n_blocks) {
  const BlockFn fn = BlockFnFor(dtype);
  CHECK(fn != nullptr) << "DequantizeIQuantBlocks: " << DTypeName(dtype) << " is not an i-quant";
  const DTypeTraits& t = Traits(dtype);
  for (int64_t i = 0; i < n_blocks; ++i) fn(src + i * t.block_bytes, dst + i * t.block_size);
}

void IQuantBlocksToQ8_0(DType dtype, const uint8_t* src, int64_t n_blocks, uint8_t* out) {
  CHECK(IsIQuantOrMxfp4(dtype)) << "IQuantBlocksToQ8_0: " << DTypeName(dtype)
                                << " is not an i-quant";
  const DTypeTraits& t = Traits(dtype);
  const int64_t out_bytes = t.block_size / 32 * kQ8_0Bytes;
  for (int64_t i = 0; i < n_blocks; ++i) {
    BlockToQ8_0(dtype, src + i * t.block_bytes, out + i * out_bytes);
  }
}

void IQuantRowsToQ8_0(DType dtype, const uint8_t* src, int64_t n_rows, int64_t n_cols,
                      uint8_t* out) {
  IQuantBlocksToQ8_0(dtype, src, n_rows * (n_cols / Traits(dtype).block_size), out);
}

}  // namespace baton::kernels
