#include "kernels/cpu/packed_block32.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "absl/log/check.h"
#include "kernels/half.h"

namespace baton::kernels {
namespace {

// Bytes of a GGML block of dtype, and where its values start.
int64_t SourceBlockBytes(DType dtype) {
  switch (dtype) {
    case DType::kQ4_0: return 18;
    case DType::kQ4_1: return 20;
    case DType::kQ8_0: return 34;
    default: return 0;
  }
}

int64_t SourceValuesOffset(DType dtype) { return dtype == DType::kQ4_1 ? 4 : 2; }

// Bytes of a group's values per block (before the scales).
int64_t GroupValueBytes(DType dtype) { return dtype == DType::kQ8_0 ? 512 : 256; }

}  // namespace

bool HasPackedLayout(DType dtype) {
  return dtype == DType::kQ4_0 || dtype == DType::kQ4_1 || dtype == DType::kQ8_0;
}

int64_t GroupBlockBytes(DType dtype) {
  switch (dtype) {
    case DType::kQ4_0: return 256 + 32;
    case DType::kQ4_1: return 256 + 64;
    case DType::kQ8_0: return 512 + 32;
    default: return 0;
  }
}

int64_t PackedBytes(DType dtype, int64_t n_rows, int64_t n_cols) {
  const int64_t groups = (n_rows + kPackedGroupRows - 1) / kPackedGroupRows;
  return groups * (n_cols / 32) * GroupBlockBytes(dtype);
}

void PackGroups(const WeightMatrix& w, int64_t g_begin, int64_t g_end, uint8_t* packed) {
  CHECK(HasPackedLayout(w.dtype));
  const int64_t nb = w.n_cols / 32;
  const int64_t src_block = SourceBlockBytes(w.dtype);
  const int64_t row_bytes = nb * src_block;
  const int64_t values_offset = SourceValuesOffset(w.dtype);
  const int64_t value_bytes = GroupValueBytes(w.dtype);  // 4 * dwords per row-block * 16
  const int64_t dwords = value_bytes / 64;                 // dwords of one row's block values
  const int64_t gbb = GroupBlockBytes(w.dtype);
  const auto* src = static_cast<const uint8_t*>(w.data);
  for (int64_t g = g_begin; g < g_end; ++g) {
    for (int64_t b = 0; b < nb; ++b) {
      uint8_t* out = packed + (g * nb + b) * gbb;
      std::memset(out, 0, static_cast<size_t>(gbb));
      for (int j = 0; j < kPackedGroupRows; ++j) {
        const int64_t r = g * kPackedGroupRows + j;
        if (r >= w.n_rows) break;
        const uint8_t* block = src + r * row_bytes + b * src_block;
        for (int64_t v = 0; v < dwords; ++v) {
          std::memcpy(out + 64 * v + 4 * j, block + values_offset + 4 * v, 4);
        }
        std::memcpy(out + value_bytes + 2 * j, block, 2);  // d
        if (w.dtype == DType::kQ4_1) std::memcpy(out + value_bytes + 32 + 2 * j, block + 2, 2);
      }
    }
  }
}

template <DType kDType>
void MatMulPackedScalar(const MatMulArgs& a, int64_t row_begin, int64_t row_end) {
  const int64_t nb = a.n_cols / 32;
  const int64_t gbb = GroupBlockBytes(kDType);
  const int64_t value_bytes = GroupValueBytes(kDType);
  const int64_t ss = a.x.scale_stride;
  for (int64_t i = 0; i < a.n; ++i) {
    const int8_t* xq = a.x.qs + i * a.n_cols;
    for (int64_t r = row_begin; r < row_end; ++r) {
      const int64_t g = r / kPackedGroupRows;
      const int j = static_cast<int>(r % kPackedGroupRows);
      float acc[8] = {};
      float summs = 0.0f;
      for (int64_t b = 0; b < nb; ++b) {
        const uint8_t* blk = a.w + (g * nb + b) * gbb;
        uint16_t h;
        std::memcpy(&h, blk + value_bytes + 2 * j, 2);
        const float scale = F16ToF32(h) * a.x.d[i * ss + b];
        for (int l = 0; l < 8; ++l) {
          int32_t p = 0;
          for (int t = 0; t < 4; ++t) {
            const int k = 4 * l + t;
            int32_t w;
            if constexpr (kDType == DType::kQ8_0) {
              w = static_cast<int8_t>(blk[64 * l + 4 * j + t]);
            } else {
              const uint8_t byte = blk[64 * (l % 4) + 4 * j + t];
              w = l < 4 ? (byte & 0x0f) : (byte >> 4);
              if constexpr (kDType == DType::kQ4_0) w -= 8;
            }
            p += w * xq[32 * b + k];
          }
          acc[l] = std::fma(scale, static_cast<float>(p), acc[l]);
        }
        if constexpr (kDType == DType::kQ4_1) {
          std::memcpy(&h, blk + value_bytes + 32 + 2 * j, 2);
          summs = std::fma(F16ToF32(h), a.x.s[i * ss + b], summs);
        }
      }
      float y = ((acc[0] + acc[4]) + (acc[2] + acc[6])) + ((acc[1] + acc[5]) + (acc[3] + acc[7]));
      if constexpr (kDType == DType::kQ4_1) y += summs;
      a.y[i * a.n_rows + r] = y;
    }
  }
}

template void MatMulPackedScalar<DType::kQ4_0>(const MatMulArgs&, int64_t, int64_t);
template void MatMulPackedScalar<DType::kQ4_1>(const MatMulArgs&, int64_t, int64_t);
template void MatMulPackedScalar<DType::kQ8_0>(const MatMulArgs&, int64_t, int64_t);

}  // namespace baton::kernels
