// The decode products for 1 to 8 activation rows on split weight matrices (split_blocks.cuh):
// x is quantized to 8 bits once per product (or once for several products of the same x), then
// one kernel reads every weight byte once, with 16-byte (8 for Q6_K) loads, and multiplies it
// with all n rows of x in integer dot products (quantized_dots.cuh). How a CTA splits the rows
// and columns is a variant (product_variants.h), chosen per shape by the sweep's table.
//
// Thread-safety: stateless launches on the caller's stream.
#ifndef BATON_KERNELS_CUDA_QUANTIZED_MATVEC_CUH_
#define BATON_KERNELS_CUDA_QUANTIZED_MATVEC_CUH_

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "kernels/cuda/q8_rows.h"
#include "kernels/cuda/split_blocks.cuh"
#include "kernels/dtype.h"

namespace baton::kernels::cuda {

// Device bytes Q8Rows of x [n, n_cols] take (n_cols a multiple of 32).
size_t Q8RowsBytes(int64_t n, int64_t n_cols);

// x [n, n_cols] f32 quantized into `scratch` (Q8RowsBytes of device memory): per 32 values,
// d = max |x| / 127 and q = round(x / d). Queued on `stream`.
Q8Rows LaunchQuantizeActivations(const float* x, int64_t n, int64_t n_cols, void* scratch,
                                 cudaStream_t stream);

// y [n, n_rows] = x · Wᵀ for W split (n_rows x n_cols of `dtype`), n in [1, kQuantizedMaxRows],
// with
// kMatVecVariants[variant]. Queued on `stream`.
void LaunchQuantizedMatVec(DType dtype, int variant, const void* w, int64_t n_rows,
                           int64_t n_cols, const Q8Rows& x, int64_t n, float* y,
                           cudaStream_t stream);

}  // namespace baton::kernels::cuda

#endif  // BATON_KERNELS_CUDA_QUANTIZED_MATVEC_CUH_
