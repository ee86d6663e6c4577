// The GPU's side of split weight matrices (split_geometry.h says the layout): the kernel that
// splits a stored matrix, and the f16 dequantization of a split one. Thread-safety: stateless
// launches on the caller's stream.
#ifndef BATON_KERNELS_CUDA_SPLIT_BLOCKS_CUH_
#define BATON_KERNELS_CUDA_SPLIT_BLOCKS_CUH_

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <optional>

#include "kernels/cuda/split_geometry.h"
#include "kernels/dtype.h"

namespace baton::kernels::cuda {

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
