#include "kernels/cuda/split_geometry.h"

#include <algorithm>

namespace baton::kernels::cuda {

std::optional<SplitGeometry> SplitGeometryOf(DType dtype) {
  switch (dtype) {
    case DType::kQ4_0:  // f16 d | qs[16]
      return SplitGeometry{.block_values = 32, .block_bytes = 18, .bits_offset = 2,
                           .bits_bytes = 16};
    case DType::kQ4_1:  // f16 d, m | qs[16]
      return SplitGeometry{.block_values = 32, .block_bytes = 20, .bits_offset = 4,
                           .bits_bytes = 16};
    case DType::kQ8_0:  // f16 d | qs[32]
      return SplitGeometry{.block_values = 32, .block_bytes = 34, .bits_offset = 2,
                           .bits_bytes = 32};
    case DType::kQ4_K:  // f16 d, dmin; scales[12] | qs[128]
      return SplitGeometry{.block_values = 256, .block_bytes = 144, .bits_offset = 16,
                           .bits_bytes = 128};
    case DType::kQ6_K:  // ql[128], qh[64] | scales[16]; f16 d
      return SplitGeometry{.block_values = 256, .block_bytes = 210, .bits_offset = 0,
                           .bits_bytes = 192};
    default:
      return std::nullopt;
  }
}

std::vector<uint8_t> SplitOnHost(const SplitGeometry& g, std::span<const uint8_t> stored,
                                 int64_t n_blocks) {
  std::vector<uint8_t> out(SplitMatrixBytes(g, n_blocks), 0);
  uint8_t* bits = out.data();
  uint8_t* headers = out.data() + SplitHeadersOffset(g, n_blocks);
  for (int64_t b = 0; b < n_blocks; ++b) {
    const uint8_t* from = stored.data() + b * g.block_bytes;
    uint8_t* to_header = headers + b * g.header_bytes();
    std::copy(from, from + g.bits_offset, to_header);
    std::copy(from + g.bits_offset, from + g.bits_offset + g.bits_bytes, bits + b * g.bits_bytes);
    std::copy(from + g.bits_offset + g.bits_bytes, from + g.block_bytes,
              to_header + g.bits_offset);
  }
  return out;
}

}  // namespace baton::kernels::cuda
