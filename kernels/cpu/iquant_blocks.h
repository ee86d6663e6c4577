// The i-quant (IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ4_NL, IQ4_XS) and MXFP4
// block formats: their values, and their form as Q8_0 blocks, in which the MatMul kernels multiply
// them.
//
// Values: the scalar reference behind DequantizeRow (dequantize.h), with GGML's order of float
// operations, so that they agree with llama.cpp's bit for bit
// (tests/kernels/iquant_blocks_test.cc).
//
// Q8_0 form (one Q8_0 block per 32 values, 34 bytes: f16 scale, 32 int8). Where the 32 values
// share one scale (all but IQ2_XS, IQ2_S and IQ1_M), their values are that scale times small
// integers, exactly: the form holds those integers under the scale rounded to f16, so each value
// is within a relative 2^-11 of llama.cpp's, and exact where the scale is an f16 (always for
// IQ4_NL, whose scale is its block's f16; for MXFP4 where its exponent e is within 107..146, its
// scale 2^(e - 131) an f16 and its doubled E2M1 levels times 8 the integers; below, values under
// 2^-19 flush toward zero; above, they pass f16's range and overflow, where weights of order 1
// have exponents near 127). IQ2_XS, IQ2_S and IQ1_M have a scale per 16 values: their 32 values
// are requantized to Q8_0 (QuantizeRow), each within half a step, 1/254 of their largest
// magnitude.
//
// Thread-safety: pure functions.
#ifndef BATON_KERNELS_CPU_IQUANT_BLOCKS_H_
#define BATON_KERNELS_CPU_IQUANT_BLOCKS_H_

#include <cstdint>

#include "kernels/dtype.h"

namespace baton::kernels {

// Whether dtype is one of the types above.
bool IsIQuantOrMxfp4(DType dtype);

// dst[0, n_blocks * block_size) = the values of n_blocks blocks of dtype at src (unaligned).
// dtype must have IsIQuantOrMxfp4 (programmer error otherwise).
void DequantizeIQuantBlocks(DType dtype, const uint8_t* src, float* dst, int64_t n_blocks);

// out[0, RowBytes(kQ8_0, n_blocks * block_size)) = the Q8_0 form above of n_blocks blocks of
// dtype at src. dtype must have IsIQuantOrMxfp4.
void IQuantBlocksToQ8_0(DType dtype, const uint8_t* src, int64_t n_blocks, uint8_t* out);

// The Q8_0 form of n_rows rows of n_cols values of dtype (a multiple of its block size) at src:
// out [n_rows * RowBytes(kQ8_0, n_cols)].
void IQuantRowsToQ8_0(DType dtype, const uint8_t* src, int64_t n_rows, int64_t n_cols,
                      uint8_t* out);

}  // namespace baton::kernels

#endif  // BATON_KERNELS_CPU_IQUANT_BLOCKS_H_
