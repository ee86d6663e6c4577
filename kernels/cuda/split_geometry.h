// Quantized weight matrices in the layout the GPU's quantized products read ("split" blocks),
// made once at registration: every GGML block of the matrix cut into its quantized values (the
// bits) and the rest (the header: scales, minimums), the bits of all blocks first, row after
// row, then the headers. Each block's bits start at a multiple of 16 bytes, so a thread reads
// them with 16-byte loads and a warp's loads of consecutive blocks are one contiguous run; in the
// file's own layout (18-byte Q4_0 blocks, 210-byte Q6_K blocks) the same bytes need 2-byte
// loads.
//
//   memory: [bits: n_blocks x bits_bytes][pad to 256][headers: n_blocks x header_bytes]
//   block g (row r, block b of the row: g = r * blocks_per_row + b) keeps its bytes in order:
//   header = stored[0, bits_offset) ++ stored[bits_offset + bits_bytes, block_bytes).
//
// Plain C++ (the GPU makes its copies with split_blocks.cuh's kernel; SplitOnHost makes the
// same bytes for the CPU tests). Thread-safety: pure functions.
#ifndef BATON_KERNELS_CUDA_SPLIT_GEOMETRY_H_
#define BATON_KERNELS_CUDA_SPLIT_GEOMETRY_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "kernels/host_device.h"
#include "kernels/dtype.h"

namespace baton::kernels::cuda {

struct SplitGeometry {
  int block_values = 0;  // weights per block
  int block_bytes = 0;   // a block as stored
  int bits_offset = 0;   // where its quantized values start
  int bits_bytes = 0;    // their length, a multiple of 8
  BATON_HOST_DEVICE constexpr int header_bytes() const { return block_bytes - bits_bytes; }
};

// The split of `dtype`'s blocks (Q4_0, Q4_1, Q8_0, Q4_K, Q6_K), or nullopt for a type kept as
// stored.
std::optional<SplitGeometry> SplitGeometryOf(DType dtype);

// Bytes from a split matrix's start to its headers.
inline size_t SplitHeadersOffset(const SplitGeometry& g, int64_t n_blocks) {
  const size_t bits = static_cast<size_t>(n_blocks) * g.bits_bytes;
  return (bits + 255) / 256 * 256;
}

// Bytes a split matrix of n_blocks blocks takes.
inline size_t SplitMatrixBytes(const SplitGeometry& g, int64_t n_blocks) {
  return SplitHeadersOffset(g, n_blocks) + static_cast<size_t>(n_blocks) * g.header_bytes();
}

// A split matrix, as the kernels take it.
struct SplitView {
  const uint8_t* bits = nullptr;     // n_blocks x bits_bytes
  const uint8_t* headers = nullptr;  // n_blocks x header_bytes
};

inline SplitView SplitViewOf(const SplitGeometry& g, const void* matrix, int64_t n_blocks) {
  const auto* base = static_cast<const uint8_t*>(matrix);
  return {.bits = base, .headers = base + SplitHeadersOffset(g, n_blocks)};
}

// The n_blocks blocks of `stored` (the file's layout) split, on the host: SplitMatrixBytes of
// the bytes the GPU's split kernel writes (the padding zero).
std::vector<uint8_t> SplitOnHost(const SplitGeometry& g, std::span<const uint8_t> stored,
                                 int64_t n_blocks);

}  // namespace baton::kernels::cuda

#endif  // BATON_KERNELS_CUDA_SPLIT_GEOMETRY_H_
