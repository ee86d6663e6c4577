// Quantized weight matrices in the layout the decode products read ("split" blocks), made once
// at registration: every GGML block of the matrix cut into its quantized values (the bits) and
// the rest (the header: scales, minimums), the bits of all blocks first, row after row, then the
// headers. Each block's bits start at a multiple of 16 bytes, so a thread reads them with 16-byte
// loads and a warp's loads of consecutive blocks are one contiguous run; in the file's own layout
// (18-byte Q4_0 blocks, 210-byte Q6_K blocks) the same bytes need 2-byte loads.
//
//   device memory: [bits: n_blocks x bits_bytes][pad to 256][headers: n_blocks x header_bytes]
//   block g (row r, block b of the row: g = r * blocks_per_row + b) keeps its bytes in order:
//   header = stored[0, bits_offset) ++ stored[bits_offset + bits_bytes, block_bytes).
//
// Only the types the quantized-activation dot products know (quantized_dots.cuh) are split; the
// rest stay as stored. Thread-safety: pure functions and kernels.
#ifndef BATON_KERNELS_CUDA_SPLIT_BLOCKS_CUH_
#define BATON_KERNELS_CUDA_SPLIT_BLOCKS_CUH_

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <optional>

#include "kernels/dtype.h"

namespace baton::kernels::cuda {

struct SplitGeometry {
  int block_values = 0;  // weights per block
  int block_bytes = 0;   // a block as stored
  int bits_offset = 0;   // where its quantized values start
  int bits_bytes = 0;    // their length, a multiple of 8
  __host__ __device__ constexpr int header_bytes() const { return block_bytes - bits_bytes; }
};

// The split of `dtype`'s blocks, or nullopt for a type kept as stored.
std::optional<SplitGeometry> SplitGeometryOf(DType dtype);

// Bytes from a split matrix's start to its headers.
inline size_t SplitHeadersOffset(const SplitGeometry& g, int64_t n_blocks) {
  const size_t bits = static_cast<size_t>(n_blocks) * g.bits_bytes;
  return (bits + 255) / 256 * 256;
}

// Device bytes a split matrix of n_blocks blocks takes.
inline size_t SplitMatrixBytes(const SplitGeometry& g, int64_t n_blocks) {
  return SplitHeadersOffset(g, n_blocks) + static_cast<size_t>(n_blocks) * g.header_bytes();
}

// A split matrix on the device, as the kernels take it.
struct SplitView {
  const uint8_t* bits = nullptr;     // n_blocks x bits_bytes
  const uint8_t* headers = nullptr;  // n_blocks x header_bytes
};

inline SplitView SplitViewOf(const SplitGeometry& g, const void* matrix, int64_t n_blocks) {
  const auto* base = static_cast<const uint8_t*>(matrix);
  return {.bits = base, .headers = base + SplitHeadersOffset(g, n_blocks)};
}

// out (SplitMatrixBytes) = the n_blocks blocks of `stored` (device memory, the file's layout)
// split. Queued on `stream`.
void LaunchSplitBlocks(const SplitGeometry& g, const uint8_t* stored, int64_t n_blocks,
                       uint8_t* out, cudaStream_t stream);

// out [n_rows, n_cols] f16 (raw halves) = a split matrix of `dtype` dequantized, with the same
// values as LaunchDequantizeToF16 gives for the stored matrix.
void LaunchDequantizeSplitToF16(DType dtype, const void* matrix, int64_t n_rows, int64_t n_cols,
                                uint16_t* out, cudaStream_t stream);

}  // namespace baton::kernels::cuda

#endif  // BATON_KERNELS_CUDA_SPLIT_BLOCKS_CUH_
