// Activations quantized to 8 bits for the quantized products (quantized_matvec.cuh,
// quantized_matmul.cuh): row i of x is q[i * n_cols, ...) (int8) and ds[i * n_cols / 32, ...):
// per 32 values (d, d * sum of the 32 q), x ~= d * q. Device memory; a plain header (CUDA's
// vector types only), so that host code and tests can hold one.
#ifndef BATON_KERNELS_CUDA_Q8_ROWS_H_
#define BATON_KERNELS_CUDA_Q8_ROWS_H_

#include <vector_types.h>

#include <cstdint>

namespace baton::kernels::cuda {

struct Q8Rows {
  const int8_t* q = nullptr;    // [n, n_cols]
  const float2* ds = nullptr;   // [n, n_cols / 32]
  int64_t n_cols = 0;
};

}  // namespace baton::kernels::cuda

#endif  // BATON_KERNELS_CUDA_Q8_ROWS_H_
