#include "kernels/cpu/interleaved_rows.h"

#include <cstring>

#include "absl/log/check.h"
#include "kernels/cpu/dequantize.h"

namespace baton::kernels {

int64_t InterleaveUnitBytes(DType dtype, int64_t n_cols) {
  switch (dtype) {
    case DType::kF32:
    case DType::kF16:
    case DType::kBF16:
      return RowBytes(dtype, n_cols) % kFloatInterleaveUnitBytes == 0 ? kFloatInterleaveUnitBytes
                                                                        : 0;
    default:
      return 0;
  }
}

void InterleaveGroups(const WeightMatrix& w, int64_t g_begin, int64_t g_end, uint8_t* out) {
  const int64_t unit_bytes = InterleaveUnitBytes(w.dtype, w.n_cols);
  CHECK_GT(unit_bytes, 0) << DTypeName(w.dtype) << " rows of " << w.n_cols
                          << " values have no interleaved layout";
  const int64_t row_bytes = RowBytes(w.dtype, w.n_cols);
  const int64_t n_units = row_bytes / unit_bytes;
  const auto* src = static_cast<const uint8_t*>(w.data);
  for (int64_t g = g_begin; g < g_end; ++g) {
    const int64_t first_row = g * kInterleaveRows;
    const int64_t rows = std::min<int64_t>(kInterleaveRows, w.n_rows - first_row);
    uint8_t* group = out + first_row * row_bytes;
    for (int64_t j = 0; j < rows; ++j) {
      const uint8_t* row = src + (first_row + j) * row_bytes;
      for (int64_t b = 0; b < n_units; ++b) {
        std::memcpy(group + (b * rows + j) * unit_bytes, row + b * unit_bytes,
                    static_cast<size_t>(unit_bytes));
      }
    }
  }
}

void CopyInterleavedRow(const WeightMatrix& w, const uint8_t* interleaved, int64_t r,
                        uint8_t* row) {
  const int64_t unit_bytes = InterleaveUnitBytes(w.dtype, w.n_cols);
  CHECK_GT(unit_bytes, 0) << DTypeName(w.dtype) << " rows of " << w.n_cols
                          << " values have no interleaved layout";
  const int64_t row_bytes = RowBytes(w.dtype, w.n_cols);
  const int64_t first_row = r / kInterleaveRows * kInterleaveRows;
  const int64_t rows = std::min<int64_t>(kInterleaveRows, w.n_rows - first_row);
  const uint8_t* group = interleaved + first_row * row_bytes;
  for (int64_t b = 0; b < row_bytes / unit_bytes; ++b) {
    std::memcpy(row + b * unit_bytes, group + (b * rows + r - first_row) * unit_bytes,
                static_cast<size_t>(unit_bytes));
  }
}

}  // namespace baton::kernels
