// Dequantization of one row of any supported weight type to f32 (the scalar reference).
//
// Thread-safety: pure functions.
#ifndef BATON_KERNELS_CPU_DEQUANTIZE_H_
#define BATON_KERNELS_CPU_DEQUANTIZE_H_

#include <cstdint>

#include "kernels/dtype.h"

namespace baton::kernels {

// Bytes of a row of `n` elements of `dtype`. Programmer error when n is not a multiple of the
// block size.
int64_t RowBytes(DType dtype, int64_t n);

// dst[0, n) = the values of the n elements at src. dtype must have can_dequantize; n a multiple of
// its block size (programmer errors otherwise: validate with the GGUF reader first).
void DequantizeRow(DType dtype, const void* src, float* dst, int64_t n);

}  // namespace baton::kernels

#endif  // BATON_KERNELS_CPU_DEQUANTIZE_H_
