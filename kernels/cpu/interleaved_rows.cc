#include "kernels/cpu/interleaved_rows.h"

#include <cstring>

#include "absl/log/check.h"
#include "kernels/cpu/dequantize.h"

namespace baton::kernels {

bool HasInterleavedLayout(DType dtype) {
  switch (dtype) {
    case DType::kQ2_K:
    case DType::kQ3_K:
    case DType::kQ4_K:
    case DType::kQ5_K:
    case DType::kQ6_K:
      return true;
    default:
      return false;
  }
}

void InterleaveGroups(const WeightMatrix& w, int64_t g_begin, int64_t g_end, uint8_t* out) {
  CHECK(HasInterleavedLayout(w.dtype));
  const int64_t block_bytes = Traits(w.dtype).block_bytes;
  const int64_t row_bytes = RowBytes(w.dtype, w.n_cols);
  const int64_t n_blocks = row_bytes / block_bytes;
  const auto* src = static_cast<const uint8_t*>(w.data);
  for (int64_t g = g_begin; g < g_end; ++g) {
    const int64_t first_row = g * kInterleaveRows;
    const int64_t rows = std::min<int64_t>(kInterleaveRows, w.n_rows - first_row);
    uint8_t* group = out + first_row * row_bytes;
    for (int64_t j = 0; j < rows; ++j) {
      const uint8_t* row = src + (first_row + j) * row_bytes;
      for (int64_t b = 0; b < n_blocks; ++b) {
        std::memcpy(group + (b * rows + j) * block_bytes, row + b * block_bytes,
                    static_cast<size_t>(block_bytes));
      }
    }
  }
}

}  // namespace baton::kernels
