#include "kernels/cpu/dequantize.h"

#include <cstdint>
#include <cstring>

#include "absl/log/check.h"
#include "kernels/cpu/block_bytes.h"
#include "kernels/cpu/iquant_blocks.h"
#include "kernels/half.h"

// Scalar reference dequantization, one GGML block layout per function. Each function walks the
// blocks of a row; `src` needs no particular alignment (fields are read with memcpy). The order of
// the float operations (scale products first, then multiply, then subtract/add the minimum) is the
// one GGML's reference uses, so results agree bit for bit.

namespace baton::kernels {
namespace {

constexpr int kQK = 32;     // elements per block of the legacy quants
constexpr int kQK_K = 256;  // elements per K-quant super-block

void DequantizeF16(const uint8_t* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = ReadF16(src + 2 * i);
}

void DequantizeBF16(const uint8_t* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    uint16_t h;
    std::memcpy(&h, src + 2 * i, sizeof h);
    dst[i] = BF16ToF32(h);
  }
}

// Q4_0 block (18 bytes): f16 d; u8 qs[16]. Element j < 16 is the low nibble of qs[j], element
// j + 16 its high nibble; value (q - 8) * d.
void DequantizeQ4_0(const uint8_t* src, float* dst, int64_t n_blocks) {
  for (int64_t b = 0; b < n_blocks; ++b, src += 18, dst += kQK) {
    const float d = ReadF16(src);
    const uint8_t* qs = src + 2;
    for (int j = 0; j < 16; ++j) {
      dst[j] = static_cast<float>((qs[j] & 0x0f) - 8) * d;
      dst[j + 16] = static_cast<float>((qs[j] >> 4) - 8) * d;
    }
  }
}

// Q4_1 block (20 bytes): f16 d, m; u8 qs[16]. Nibbles as Q4_0; value q * d + m.
void DequantizeQ4_1(const uint8_t* src, float* dst, int64_t n_blocks) {
  for (int64_t b = 0; b < n_blocks; ++b, src += 20, dst += kQK) {
    const float d = ReadF16(src);
    const float m = ReadF16(src + 2);
    const uint8_t* qs = src + 4;
    for (int j = 0; j < 16; ++j) {
      dst[j] = static_cast<float>(qs[j] & 0x0f) * d + m;
      dst[j + 16] = static_cast<float>(qs[j] >> 4) * d + m;
    }
  }
}

// Q5_0 block (22 bytes): f16 d; u8 qh[4]; u8 qs[16]. q = nibble | (fifth bit << 4);
// value (q - 16) * d.
void DequantizeQ5_0(const uint8_t* src, float* dst, int64_t n_blocks) {
  for (int64_t b = 0; b < n_blocks; ++b, src += 22, dst += kQK) {
    const float d = ReadF16(src);
    const uint32_t qh = ReadU32(src + 2);
    const uint8_t* qs = src + 6;
    for (int j = 0; j < 16; ++j) {
      const int lo = (qs[j] & 0x0f) | static_cast<int>(((qh >> j) & 1u) << 4);
      const int hi = (qs[j] >> 4) | static_cast<int>(((qh >> (j + 16)) & 1u) << 4);
      dst[j] = static_cast<float>(lo - 16) * d;
      dst[j + 16] = static_cast<float>(hi - 16) * d;
    }
  }
}

// Q5_1 block (24 bytes): f16 d, m; u8 qh[4]; u8 qs[16]. q as Q5_0; value q * d + m.
void DequantizeQ5_1(const uint8_t* src, float* dst, int64_t n_blocks) {
  for (int64_t b = 0; b < n_blocks; ++b, src += 24, dst += kQK) {
    const float d = ReadF16(src);
    const float m = ReadF16(src + 2);
    const uint32_t qh = ReadU32(src + 4);
    const uint8_t* qs = src + 8;
    for (int j = 0; j < 16; ++j) {
      const int lo = (qs[j] & 0x0f) | static_cast<int>(((qh >> j) & 1u) << 4);
      const int hi = (qs[j] >> 4) | static_cast<int>(((qh >> (j + 16)) & 1u) << 4);
      dst[j] = static_cast<float>(lo) * d + m;
      dst[j + 16] = static_cast<float>(hi) * d + m;
    }
  }
}

// Q8_0 block (34 bytes): f16 d; i8 qs[32]; value q * d.
void DequantizeQ8_0(const uint8_t* src, float* dst, int64_t n_blocks) {
  for (int64_t b = 0; b < n_blocks; ++b, src += 34, dst += kQK) {
    const float d = ReadF16(src);
    const int8_t* qs = reinterpret_cast<const int8_t*>(src + 2);
    for (int j = 0; j < kQK; ++j) dst[j] = static_cast<float>(qs[j]) * d;
  }
}

// Q2_K super-block (84 bytes): u8 scales[16]; u8 qs[64]; f16 d; f16 dmin. 16 sub-blocks of 16;
// scales[i] holds sub-block i's 4-bit scale (low nibble) and 4-bit min (high nibble). Each half of
// 128 elements uses 32 bytes of qs: 2-bit field s (bits 2s..2s+1) of byte l is element
// 32s + l of that half. Value d * scale * q - dmin * min.
void DequantizeQ2_K(const uint8_t* src, float* dst, int64_t n_blocks) {
  for (int64_t b = 0; b < n_blocks; ++b, src += 84, dst += kQK_K) {
    const uint8_t* scales = src;
    const uint8_t* qs = src + 16;
    const float d = ReadF16(src + 80);
    const float dmin = ReadF16(src + 82);
    for (int i = 0; i < kQK_K; ++i) {
      const int half = i / 128;
      const int within = i % 128;
      const int field = within / 32;
      const int l = within % 32;
      const int sub = i / 16;
      const float dl = d * static_cast<float>(scales[sub] & 0x0f);
      const float ml = dmin * static_cast<float>(scales[sub] >> 4);
      const int q = (qs[32 * half + l] >> (2 * field)) & 3;
      dst[i] = dl * static_cast<float>(q) - ml;
    }
  }
}

// Q3_K super-block (110 bytes): u8 hmask[32]; u8 qs[64]; u8 scales[12]; f16 d. 16 sub-blocks of
// 16 with signed 6-bit scales (stored + 32): the low 4 bits of scale i are the low nibble of
// scales[i] for i < 8, the high nibble of scales[i - 8] otherwise; its high 2 bits are bits
// 2*(i/4).. of scales[8 + i % 4]. The low 2 bits of q come as in Q2_K; bit (i / 32) of hmask[i %
// 32] set means +0, clear means -4. Value d * (scale - 32) * q.
void DequantizeQ3_K(const uint8_t* src, float* dst, int64_t n_blocks) {
  for (int64_t b = 0; b < n_blocks; ++b, src += 110, dst += kQK_K) {
    const uint8_t* hmask = src;
    const uint8_t* qs = src + 32;
    const uint8_t* packed = src + 96;
    const float d = ReadF16(src + 108);
    int scales[16];
    for (int i = 0; i < 16; ++i) {
      const int low = i < 8 ? (packed[i] & 0x0f) : (packed[i - 8] >> 4);
      const int high = (packed[8 + i % 4] >> (2 * (i / 4))) & 3;
      scales[i] = (low | (high << 4)) - 32;
    }
    for (int i = 0; i < kQK_K; ++i) {
      const int half = i / 128;
      const int within = i % 128;
      const int field = within / 32;
      const int l = within % 32;
      const float dl = d * static_cast<float>(scales[i / 16]);
      const int low = (qs[32 * half + l] >> (2 * field)) & 3;
      const int minus = (hmask[i % 32] >> (i / 32)) & 1 ? 0 : 4;
      dst[i] = dl * static_cast<float>(low - minus);
    }
  }
}

// The 6-bit scale and min of sub-block j (0..7) of a Q4_K/Q5_K super-block, packed in 12 bytes:
// for j < 4 the low 6 bits of bytes j (scale) and j + 4 (min); for j >= 4 the scale is the low
// nibble of byte j + 4 with the top 2 bits of byte j - 4 above it, the min the high nibble of
// byte j + 4 with the top 2 bits of byte j above it.
void ScaleMinK4(const uint8_t* packed, int j, int* scale, int* min) {
  if (j < 4) {
    *scale = packed[j] & 63;
    *min = packed[j + 4] & 63;
  } else {
    *scale = (packed[j + 4] & 0x0f) | ((packed[j - 4] >> 6) << 4);
    *min = (packed[j + 4] >> 4) | ((packed[j] >> 6) << 4);
  }
}

// Q4_K super-block (144 bytes): f16 d; f16 dmin; u8 scales[12]; u8 qs[128]. 8 sub-blocks of 32.
// Each 64 elements use 32 bytes of qs: low nibbles are sub-block 2k, high nibbles 2k + 1.
// Value (d * scale) * q - (dmin * min).
void DequantizeQ4_K(const uint8_t* src, float* dst, int64_t n_blocks) {
  for (int64_t b = 0; b < n_blocks; ++b, src += 144, dst += kQK_K) {
    const float d = ReadF16(src);
    const float dmin = ReadF16(src + 2);
    const uint8_t* packed = src + 4;
    const uint8_t* qs = src + 16;
    for (int k = 0; k < 4; ++k) {
      int sc0, m0, sc1, m1;
      ScaleMinK4(packed, 2 * k, &sc0, &m0);
      ScaleMinK4(packed, 2 * k + 1, &sc1, &m1);
      const float d0 = d * static_cast<float>(sc0), min0 = dmin * static_cast<float>(m0);
      const float d1 = d * static_cast<float>(sc1), min1 = dmin * static_cast<float>(m1);
      const uint8_t* q = qs + 32 * k;
      float* y = dst + 64 * k;
      for (int l = 0; l < 32; ++l) {
        y[l] = d0 * static_cast<float>(q[l] & 0x0f) - min0;
        y[l + 32] = d1 * static_cast<float>(q[l] >> 4) - min1;
      }
    }
  }
}

// Q5_K super-block (176 bytes): f16 d; f16 dmin; u8 scales[12]; u8 qh[32]; u8 qs[128]. As Q4_K,
// with the fifth bit of element l of sub-block s in bit s of qh[l].
void DequantizeQ5_K(const uint8_t* src, float* dst, int64_t n_blocks) {
  for (int64_t b = 0; b < n_blocks; ++b, src += 176, dst += kQK_K) {
    const float d = ReadF16(src);
    const float dmin = ReadF16(src + 2);
    const uint8_t* packed = src + 4;
    const uint8_t* qh = src + 16;
    const uint8_t* qs = src + 48;
    for (int k = 0; k < 4; ++k) {
      int sc0, m0, sc1, m1;
      ScaleMinK4(packed, 2 * k, &sc0, &m0);
      ScaleMinK4(packed, 2 * k + 1, &sc1, &m1);
      const float d0 = d * static_cast<float>(sc0), min0 = dmin * static_cast<float>(m0);
      const float d1 = d * static_cast<float>(sc1), min1 = dmin * static_cast<float>(m1);
      const uint8_t* q = qs + 32 * k;
      float* y = dst + 64 * k;
      for (int l = 0; l < 32; ++l) {
        const int hi0 = ((qh[l] >> (2 * k)) & 1) << 4;
        const int hi1 = ((qh[l] >> (2 * k + 1)) & 1) << 4;
        y[l] = d0 * static_cast<float>((q[l] & 0x0f) | hi0) - min0;
        y[l + 32] = d1 * static_cast<float>((q[l] >> 4) | hi1) - min1;
      }
    }
  }
}

// Q6_K super-block (210 bytes): u8 ql[128]; u8 qh[64]; i8 scales[16]; f16 d. 16 sub-blocks of 16.
// Each half of 128 elements uses 64 bytes of ql and 32 of qh: for l < 32, element l takes the low
// nibble of ql[l], element 32 + l the low nibble of ql[32 + l], element 64 + l the high nibble of
// ql[l], element 96 + l the high nibble of ql[32 + l]; their high 2 bits are bit pairs 0, 1, 2, 3
// of qh[l]. Value (d * scale) * (q - 32).
void DequantizeQ6_K(const uint8_t* src, float* dst, int64_t n_blocks) {
  for (int64_t b = 0; b < n_blocks; ++b, src += 210, dst += kQK_K) {
    const float d = ReadF16(src + 208);
    const int8_t* scales = reinterpret_cast<const int8_t*>(src + 192);
    for (int half = 0; half < 2; ++half) {
      const uint8_t* ql = src + 64 * half;
      const uint8_t* qh = src + 128 + 32 * half;
      float* y = dst + 128 * half;
      for (int l = 0; l < 32; ++l) {
        const int q[4] = {
            ((ql[l] & 0x0f) | (((qh[l] >> 0) & 3) << 4)) - 32,
            ((ql[l + 32] & 0x0f) | (((qh[l] >> 2) & 3) << 4)) - 32,
            ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32,
            ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32,
        };
        for (int s = 0; s < 4; ++s) {
          const int element = 32 * s + l;  // within this half
          const float dl = d * static_cast<float>(scales[8 * half + element / 16]);
          y[element] = dl * static_cast<float>(q[s]);
        }
      }
    }
  }
}

// Q8_K super-block (292 bytes): f32 d; i8 qs[256]; i16 bsums[16] (sums, unused here).
void DequantizeQ8_K(const uint8_t* src, float* dst, int64_t n_blocks) {
  for (int64_t b = 0; b < n_blocks; ++b, src += 292, dst += kQK_K) {
    const float d = ReadF32(src);
    const int8_t* qs = reinterpret_cast<const int8_t*>(src + 4);
    for (int j = 0; j < kQK_K; ++j) dst[j] = d * static_cast<float>(qs[j]);
  }
}

}  // namespace

int64_t RowBytes(DType dtype, int64_t n) {
  const DTypeTraits& t = Traits(dtype);
  CHECK(n >= 0 && n % t.block_size == 0) << "row of " << n << " elements is not a multiple of the "
                                         << t.name << " block size " << t.block_size;
  return n / t.block_size * t.block_bytes;
}

void DequantizeRow(DType dtype, const void* src, float* dst, int64_t n) {
  const DTypeTraits& t = Traits(dtype);
  CHECK(t.can_dequantize) << "DequantizeRow: " << t.name << " is not supported";
  CHECK(n >= 0 && n % t.block_size == 0)
      << "DequantizeRow: " << n << " elements is not a multiple of the " << t.name << " block size "
      << t.block_size;
  const auto* s = static_cast<const uint8_t*>(src);
  const int64_t n_blocks = n / t.block_size;
  switch (dtype) {
    case DType::kF32:
      if (n > 0) std::memcpy(dst, s, static_cast<size_t>(n) * sizeof(float));
      return;
    case DType::kF16:
      return DequantizeF16(s, dst, n);
    case DType::kBF16:
      return DequantizeBF16(s, dst, n);
    case DType::kQ4_0:
      return DequantizeQ4_0(s, dst, n_blocks);
    case DType::kQ4_1:
      return DequantizeQ4_1(s, dst, n_blocks);
    case DType::kQ5_0:
      return DequantizeQ5_0(s, dst, n_blocks);
    case DType::kQ5_1:
      return DequantizeQ5_1(s, dst, n_blocks);
    case DType::kQ8_0:
      return DequantizeQ8_0(s, dst, n_blocks);
    case DType::kQ2_K:
      return DequantizeQ2_K(s, dst, n_blocks);
    case DType::kQ3_K:
      return DequantizeQ3_K(s, dst, n_blocks);
    case DType::kQ4_K:
      return DequantizeQ4_K(s, dst, n_blocks);
    case DType::kQ5_K:
      return DequantizeQ5_K(s, dst, n_blocks);
    case DType::kQ6_K:
      return DequantizeQ6_K(s, dst, n_blocks);
    case DType::kQ8_K:
      return DequantizeQ8_K(s, dst, n_blocks);
    default:
      break;
  }
  if (IsIQuantOrMxfp4(dtype)) return DequantizeIQuantBlocks(dtype, s, dst, n_blocks);
  CHECK(false) << "DequantizeRow: no kernel for " << t.name;
}

}  // namespace baton::kernels
