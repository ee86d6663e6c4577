// The quantized products past the matrix-vector kernels' 8 rows (decode batches, prefill) on the
// tensor cores: y [n, n_rows] = x · Wᵀ for W split (split_geometry.h) in a type with a
// tensor-core product (kMmaTypes), x quantized to 8 bits once (LaunchQuantizeActivations). Each
// warp multiplies 16 weight rows of a 32-value group by 8 tokens in one int8 mma and scales the
// integer sums once per group (mma_warp_tile.h says how, and is tested on the CPU); the weights
// are read as stored, never dequantized into a copy. How a CTA tiles the product is a variant
// (kMmaVariants), chosen per shape by the sweep's table (product_variants.h).
//
// Needs compute capability 8.0 or newer (the build's architectures are 80 and 90).
// Thread-safety: stateless launches on the caller's stream.
#ifndef BATON_KERNELS_CUDA_QUANTIZED_MATMUL_CUH_
#define BATON_KERNELS_CUDA_QUANTIZED_MATMUL_CUH_

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/q8_rows.h"
#include "kernels/dtype.h"

namespace baton::kernels::cuda {

// y [n, n_rows] = x · Wᵀ for W split (n_rows x n_cols of `dtype`, HasMmaProduct), any n >= 1,
// with kMmaVariants[variant]. Queued on `stream`.
void LaunchQuantizedMatMul(DType dtype, int variant, const void* w, int64_t n_rows,
                           int64_t n_cols, const Q8Rows& x, int64_t n, float* y,
                           cudaStream_t stream);

}  // namespace baton::kernels::cuda

#endif  // BATON_KERNELS_CUDA_QUANTIZED_MATMUL_CUH_
