#include "kernels/cpu/super_block_lanes.h"

#include <cstring>

#include "absl/log/check.h"
#include "kernels/cpu/dequantize.h"

namespace baton::kernels {

bool HasSuperBlockLanes(DType dtype) {
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

int64_t SuperBlockLanesBytes(const WeightMatrix& w) {
  return LaneGroups(w.n_rows) * kLaneRows * RowBytes(w.dtype, w.n_cols);
}

namespace {

// Where dword q of row j's block lies in the block's lanes (the layout above).
int64_t LaneDwordOffset(DType dtype, int64_t q, int64_t j) {
  return (kLaneRows * LaneDwordSlot(dtype, static_cast<int>(q)) + j) * 4;
}

}  // namespace

void LayOutLaneGroups(const WeightMatrix& w, int64_t g_begin, int64_t g_end, uint8_t* out) {
  CHECK(HasSuperBlockLanes(w.dtype)) << DTypeName(w.dtype) << " has no lanes layout";
  const int64_t block_bytes = Traits(w.dtype).block_bytes;
  const int64_t row_bytes = RowBytes(w.dtype, w.n_cols);
  const int64_t n_blocks = row_bytes / block_bytes;
  const int64_t dwords = block_bytes / 4, tail = block_bytes % 4;
  const auto* src = static_cast<const uint8_t*>(w.data);
  const auto DwordAt = [&](uint8_t* lanes, int64_t q, int64_t j) {
    return lanes + LaneDwordOffset(w.dtype, q, j);
  };
  for (int64_t g = g_begin; g < g_end; ++g) {
    uint8_t* group = out + g * kLaneRows * row_bytes;
    for (int64_t j = 0; j < kLaneRows; ++j) {
      const int64_t row = g * kLaneRows + j;
      for (int64_t b = 0; b < n_blocks; ++b) {
        uint8_t* lanes = group + b * kLaneRows * block_bytes;
        uint8_t* row_tail = lanes + kLaneRows * 4 * dwords + j * tail;
        if (row >= w.n_rows) {
          for (int64_t q = 0; q < dwords; ++q) std::memset(DwordAt(lanes, q, j), 0, 4);
          std::memset(row_tail, 0, static_cast<size_t>(tail));
          continue;
        }
        const uint8_t* block = src + row * row_bytes + b * block_bytes;
        for (int64_t q = 0; q < dwords; ++q) {
          std::memcpy(DwordAt(lanes, q, j), block + 4 * q, 4);
        }
        std::memcpy(row_tail, block + 4 * dwords, static_cast<size_t>(tail));
      }
    }
  }
}

void CopyLanesRow(const WeightMatrix& w, const uint8_t* lanes, int64_t r, uint8_t* row) {
  CHECK(HasSuperBlockLanes(w.dtype)) << DTypeName(w.dtype) << " has no lanes layout";
  const int64_t block_bytes = Traits(w.dtype).block_bytes;
  const int64_t row_bytes = RowBytes(w.dtype, w.n_cols);
  const int64_t dwords = block_bytes / 4, tail = block_bytes % 4;
  const int64_t j = r % kLaneRows;
  const uint8_t* group = lanes + r / kLaneRows * kLaneRows * row_bytes;
  for (int64_t b = 0; b < row_bytes / block_bytes; ++b) {
    const uint8_t* in = group + b * kLaneRows * block_bytes;
    uint8_t* block = row + b * block_bytes;
    for (int64_t q = 0; q < dwords; ++q) {
      std::memcpy(block + 4 * q, in + LaneDwordOffset(w.dtype, q, j), 4);
    }
    std::memcpy(block + 4 * dwords, in + kLaneRows * 4 * dwords + j * tail,
                static_cast<size_t>(tail));
  }
}

}  // namespace baton::kernels
