#include "kernels/cpu/packed_block32.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "absl/log/check.h"
#include "kernels/half.h"

namespace baton::kernels {
namespace {

// Where a GGML block of dtype keeps its parts, and how big its packed group block is.
struct SourceLayout {
  int64_t block_bytes;   // one row's block
  int64_t values;        // offset of the values (nibbles or int8)
  int64_t fifth_bits;    // offset of the u32 of fifth bits (Q5), -1 without
  int64_t min;           // offset of the f16 minimum (Q4_1, Q5_1), -1 without
};

SourceLayout Source(DType dtype) {
  switch (dtype) {
    case DType::kQ4_0: return {18, 2, -1, -1};
    case DType::kQ4_1: return {20, 4, -1, 2};
    case DType::kQ5_0: return {22, 6, 2, -1};
    case DType::kQ5_1: return {24, 8, 4, 2};
    case DType::kQ8_0: return {34, 2, -1, -1};
    default: return {0, 0, -1, -1};
  }
}

// The compile-time layout of dtype's group block (packed_block32.h), read at run time.
struct GroupLayout {
  int64_t value_bytes = 0;
  int64_t scale_offset = 0;
  int64_t block_bytes = 0;
};

template <DType kDType>
GroupLayout LayoutOf() {
  using B = PackedGroupBlock<kDType>;
  return {B::kValueBytes, B::kScaleOffset, B::kBlockBytes};
}

GroupLayout Group(DType dtype) {
  switch (dtype) {
    case DType::kQ4_0: return LayoutOf<DType::kQ4_0>();
    case DType::kQ4_1: return LayoutOf<DType::kQ4_1>();
    case DType::kQ5_0: return LayoutOf<DType::kQ5_0>();
    case DType::kQ5_1: return LayoutOf<DType::kQ5_1>();
    case DType::kQ8_0: return LayoutOf<DType::kQ8_0>();
    default: return {};
  }
}

}  // namespace

bool HasPackedLayout(DType dtype) { return Source(dtype).block_bytes > 0; }

int64_t GroupBlockBytes(DType dtype) { return Group(dtype).block_bytes; }

int64_t PackedBytes(DType dtype, int64_t n_rows, int64_t n_cols) {
  const int64_t groups = (n_rows + kPackedGroupRows - 1) / kPackedGroupRows;
  return groups * (n_cols / 32) * GroupBlockBytes(dtype);
}

void PackGroups(const WeightMatrix& w, int64_t g_begin, int64_t g_end, uint8_t* packed) {
  CHECK(HasPackedLayout(w.dtype));
  const SourceLayout source = Source(w.dtype);
  const int64_t nb = w.n_cols / 32;
  const int64_t row_bytes = nb * source.block_bytes;
  const GroupLayout layout = Group(w.dtype);
  const int64_t dwords = layout.value_bytes / 64;  // dwords of one row's block values
  const int64_t scales = layout.scale_offset;
  const int64_t gbb = layout.block_bytes;
  const auto* src = static_cast<const uint8_t*>(w.data);
  for (int64_t g = g_begin; g < g_end; ++g) {
    for (int64_t b = 0; b < nb; ++b) {
      uint8_t* out = packed + (g * nb + b) * gbb;
      std::memset(out, 0, static_cast<size_t>(gbb));
      uint64_t fifth[8] = {};  // mask 2v: vector v's low nibbles, 2v + 1: its high nibbles
      for (int j = 0; j < kPackedGroupRows; ++j) {
        const int64_t r = g * kPackedGroupRows + j;
        if (r >= w.n_rows) break;
        const uint8_t* block = src + r * row_bytes + b * source.block_bytes;
        for (int64_t v = 0; v < dwords; ++v) {
          std::memcpy(out + 64 * v + 4 * j, block + source.values + 4 * v, 4);
        }
        if (source.fifth_bits >= 0) {
          uint32_t qh;
          std::memcpy(&qh, block + source.fifth_bits, sizeof qh);
          for (int v = 0; v < 4; ++v) {
            for (int t = 0; t < 4; ++t) {
              fifth[2 * v] |= uint64_t{(qh >> (4 * v + t)) & 1} << (4 * j + t);
              fifth[2 * v + 1] |= uint64_t{(qh >> (16 + 4 * v + t)) & 1} << (4 * j + t);
            }
          }
        }
        std::memcpy(out + scales + 2 * j, block, 2);  // d
        if (source.min >= 0) std::memcpy(out + scales + 32 + 2 * j, block + source.min, 2);
      }
      if (source.fifth_bits >= 0) std::memcpy(out + layout.value_bytes, fifth, sizeof fifth);
    }
  }
}

void CopyPackedRow(const WeightMatrix& w, const uint8_t* packed, int64_t r, uint8_t* row) {
  CHECK(HasPackedLayout(w.dtype));
  const SourceLayout source = Source(w.dtype);
  const GroupLayout layout = Group(w.dtype);
  const int64_t nb = w.n_cols / 32;
  const int64_t dwords = layout.value_bytes / 64;
  const int64_t g = r / kPackedGroupRows;
  const int j = static_cast<int>(r % kPackedGroupRows);
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* in = packed + (g * nb + b) * layout.block_bytes;
    uint8_t* block = row + b * source.block_bytes;
    for (int64_t v = 0; v < dwords; ++v) {
      std::memcpy(block + source.values + 4 * v, in + 64 * v + 4 * j, 4);
    }
    if (source.fifth_bits >= 0) {
      uint64_t fifth[8];
      std::memcpy(fifth, in + layout.value_bytes, sizeof fifth);
      uint32_t qh = 0;
      for (int v = 0; v < 4; ++v) {
        for (int t = 0; t < 4; ++t) {
          qh |= static_cast<uint32_t>((fifth[2 * v] >> (4 * j + t)) & 1) << (4 * v + t);
          qh |= static_cast<uint32_t>((fifth[2 * v + 1] >> (4 * j + t)) & 1) << (16 + 4 * v + t);
        }
      }
      std::memcpy(block + source.fifth_bits, &qh, sizeof qh);
    }
    std::memcpy(block, in + layout.scale_offset + 2 * j, 2);  // d
    if (source.min >= 0) std::memcpy(block + source.min, in + layout.scale_offset + 32 + 2 * j, 2);
  }
}

namespace {

// Weight k (0..31) of row j of a packed group block, signed (packed_block32.h).
template <DType kDType>
int32_t PackedWeight(const uint8_t* blk, int j, int k) {
  using B = PackedGroupBlock<kDType>;
  const int l = k / 4, t = k % 4;
  if constexpr (B::kQ8) return static_cast<int8_t>(blk[64 * l + 4 * j + t]);
  const uint8_t byte = blk[64 * (l % 4) + 4 * j + t];
  int32_t w = l < 4 ? (byte & 0x0f) : (byte >> 4);
  if constexpr (B::kFifthBit) {
    uint64_t mask;  // mask 2v + (l >= 4) of vector v = l % 4
    std::memcpy(&mask, blk + B::kFifthOffset + 8 * (2 * (l % 4) + l / 4), sizeof mask);
    w += 16 * static_cast<int32_t>((mask >> (4 * j + t)) & 1);
  }
  return w - B::kOffset;
}

// The f16 at p as f32.
float LoadF16Scalar(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return F16ToF32(h);
}

// Row j of a packed group against activation row i, without the minimum term.
template <DType kDType>
float BlockDots(const MatMulArgs& a, const uint8_t* group, int j, int64_t i) {
  using B = PackedGroupBlock<kDType>;
  const int64_t nb = a.n_cols / 32;
  const int8_t* xq = a.x.qs + i * a.n_cols;
  float acc = 0.0f;
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* blk = group + b * B::kBlockBytes;
    const float scale = LoadF16Scalar(blk + B::kScaleOffset + 2 * j) *
                        a.x.d[i * a.x.scale_stride + b];
    int32_t p = 0;
    for (int k = 0; k < 32; ++k) p += PackedWeight<kDType>(blk, j, k) * xq[32 * b + k];
    acc = std::fma(scale, static_cast<float>(p), acc);
  }
  return acc;
}

}  // namespace

template <DType kDType>
void MatMulPackedScalar(const MatMulArgs& a, int64_t row_begin, int64_t row_end) {
  using B = PackedGroupBlock<kDType>;
  const int64_t nb = a.n_cols / 32;
  const int64_t ss = a.x.scale_stride;
  for (int64_t i = 0; i < a.n; ++i) {
    for (int64_t r = row_begin; r < row_end; ++r) {
      const uint8_t* group = a.w + (r / kPackedGroupRows) * nb * B::kBlockBytes;
      const int j = static_cast<int>(r % kPackedGroupRows);
      float y = BlockDots<kDType>(a, group, j, i);
      if constexpr (B::kHasMin) {
        float summs = 0.0f;
        for (int64_t b = 0; b < nb; ++b) {
          const float m = LoadF16Scalar(group + b * B::kBlockBytes + B::kMinOffset + 2 * j);
          summs = std::fma(m, a.x.s[i * ss + b], summs);
        }
        y += summs;
      }
      a.y[i * a.n_rows + r] = y;
    }
  }
}

template void MatMulPackedScalar<DType::kQ4_0>(const MatMulArgs&, int64_t, int64_t);
template void MatMulPackedScalar<DType::kQ4_1>(const MatMulArgs&, int64_t, int64_t);
template void MatMulPackedScalar<DType::kQ5_0>(const MatMulArgs&, int64_t, int64_t);
template void MatMulPackedScalar<DType::kQ5_1>(const MatMulArgs&, int64_t, int64_t);
template void MatMulPackedScalar<DType::kQ8_0>(const MatMulArgs&, int64_t, int64_t);

}  // namespace baton::kernels
