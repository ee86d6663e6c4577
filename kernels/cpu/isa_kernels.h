// The table of SIMD kernels of one instruction-set level (cpu_isa.h), which the fast CPU backend
// (cpu_backend.cc) drives: it prepares the activations, splits output rows over its thread pool
// and calls these on each range. A null entry means "no kernel at this level": the backend then
// runs the scalar reference (reference_kernels.h) for that operation or dtype.
//
// MatMul kernels read activations quantized once per call into one of three forms, decided by the
// weight dtype (ActivationFormatFor):
//   kF32   f32 rows as given                         (F32, F16, BF16 weights)
//   kQ8_1  int8 blocks of 32 with f32 scale d and     (Q4_0, Q4_1, Q8_0 weights)
//          s = d * sum(q) per block
//   kQ8_K  int8 blocks of 256 with f32 scale d and    (Q4_K, Q6_K weights)
//          int16 sums of each 16 values
// The value of element k of a quantized row is q[k] * d[block of k].
//
// Batch invariance: every kernel computes each y[i, r] with the same sequence of operations
// whatever tile or path (single-row decode kernel, multi-row tiles, AMX) it falls in, so a row's
// result depends only on that row and the weights.
//
// Levels (cpu_isa.h): avx2 (simd_avx2.cc, attention_avx2.cc); avx512-vnni (simd_avx512vnni.cc:
// the same MatMul tiles on vpdpbusd with 32 registers); amx (simd_amx.cc: Q4_0/Q4_1/Q8_0 on AMX
// tiles for n >= 4 and a 16-column AVX-512 kernel for decode, both with exact per-block integer
// dot products).
//
// Thread-safety: the kernels are pure functions; disjoint row ranges may run concurrently.
#ifndef BATON_KERNELS_CPU_ISA_KERNELS_H_
#define BATON_KERNELS_CPU_ISA_KERNELS_H_

#include <cstdint>

#include "kernels/backend.h"
#include "kernels/cpu/cpu_isa.h"
#include "kernels/dtype.h"

namespace baton::kernels {

enum class ActivationFormat { kF32, kQ8_1, kQ8_K };

// The activation form the integer/float MatMul kernels want for weights of `dtype`.
ActivationFormat ActivationFormatFor(DType dtype);

inline constexpr int kQ8_1BlockSize = 32;
inline constexpr int kQ8_KBlockSize = 256;
inline constexpr int kAttentionMaxHeadDim = 256;

// Rows of x prepared for a MatMul.
struct MatMulActivations {
  const float* f32 = nullptr;      // kF32: [n, n_cols]
  const int8_t* qs = nullptr;      // kQ8_*: [n, n_cols], readable up to row RoundUp(n, 16)
  const float* d = nullptr;        // kQ8_*: [n, scale_stride] scale per block; rows n up to
                                   // RoundUp(n, 16) are readable and zero
  const float* s = nullptr;        // kQ8_1: [n, scale_stride] d * sum(q) per block, 0 past the end
  const int16_t* bsums = nullptr;  // kQ8_K: [n, n_cols / 16] sum of q per 16 values
  int64_t scale_stride = 0;        // kQ8_*: a multiple of 8 >= blocks per row
};

// Floats per row of d and s for a row of n_cols in `format` (blocks rounded up to 8).
int64_t ActivationScaleStride(ActivationFormat format, int64_t n_cols);

struct MatMulArgs {
  const uint8_t* w = nullptr;  // weight rows, row_bytes apart
  int64_t row_bytes = 0;
  int64_t n_rows = 0;  // rows of W = columns of y
  int64_t n_cols = 0;
  MatMulActivations x;
  int64_t n = 0;  // rows of x and y
  float* y = nullptr;  // [n, n_rows]
};

// Computes y[i, r] for every i < n and r in [row_begin, row_end).
using MatMulRowsFn = void (*)(const MatMulArgs& args, int64_t row_begin, int64_t row_end);

// Quantizes one row of n_cols values (a multiple of the block size). s (Q8_1) gets one value per
// block; bsums (Q8_K) n_cols / 16.
using QuantizeQ8_1Fn = void (*)(const float* x, int64_t n_cols, int8_t* qs, float* d, float* s);
using QuantizeQ8_KFn = void (*)(const float* x, int64_t n_cols, int8_t* qs, float* d,
                                int16_t* bsums);

// Attention is computed per query over fixed segments of kAttentionSegment keys ([0, 256),
// [256, 512), ...): a partial result per segment (running max m, sum of exponentials l, and the
// unnormalized output acc), then the partials are merged in segment order. Whether one thread does
// all segments of a query or several threads share them, each query's result is the same bits.
inline constexpr int kAttentionSegment = 256;

// Floats of one head's partial result: m, l, acc[head_dim].
inline int64_t AttentionPartialSize(int32_t head_dim) { return 2 + head_dim; }

// Partial attention of one query's `group` heads q [group, head_dim] (all sharing kv head kv_h)
// over cached tokens [t_begin, t_end): partial [group, AttentionPartialSize(head_dim)].
// Needs head_dim % 8 == 0 and head_dim <= kAttentionMaxHeadDim.
using AttentionPartialFn = void (*)(const float* q, int32_t kv_h, int32_t group, int32_t t_begin,
                                    int32_t t_end, const KvLayerView& kv, float scale,
                                    float* partial);

// Folds the next segment's partial [group, AttentionPartialSize(head_dim)] into state (same
// layout; starts as AttentionInitState made it). Partials must be folded in segment order.
using AttentionFoldFn = void (*)(const float* partial, int32_t group, int32_t head_dim,
                                 float* state);

// out [group, head_dim] = the normalized output of a state with every segment folded in.
using AttentionFinishFn = void (*)(const float* state, int32_t group, int32_t head_dim,
                                   float* out);

// The empty state: m = -inf, l = 0, acc = 0 for each head.
void AttentionInitState(int32_t group, int32_t head_dim, float* state);

using SiluMulFn = void (*)(const float* gate, const float* up, int64_t count, float* y);

struct IsaKernels {
  CpuIsa isa = CpuIsa::kScalar;
  MatMulRowsFn matmul_f32 = nullptr;
  MatMulRowsFn matmul_f16 = nullptr;
  MatMulRowsFn matmul_bf16 = nullptr;
  MatMulRowsFn matmul_q4_0 = nullptr;
  MatMulRowsFn matmul_q4_1 = nullptr;
  MatMulRowsFn matmul_q8_0 = nullptr;
  MatMulRowsFn matmul_q4_k = nullptr;
  MatMulRowsFn matmul_q6_k = nullptr;
  QuantizeQ8_1Fn quantize_q8_1 = nullptr;  // never null
  QuantizeQ8_KFn quantize_q8_k = nullptr;  // never null
  AttentionPartialFn attention_partial = nullptr;
  AttentionFoldFn attention_fold = nullptr;
  AttentionFinishFn attention_finish = nullptr;
  SiluMulFn silu_mul = nullptr;
};

// The MatMul kernel of `kernels` for dtype, or null.
MatMulRowsFn MatMulKernelFor(const IsaKernels& kernels, DType dtype);

// The table of a level; `isa` must not exceed DetectCpuIsaUncapped() (CHECK).
const IsaKernels& KernelsFor(CpuIsa isa);

// Portable quantizers (the definition of the activation formats; the SIMD ones match them bit for
// bit).
void QuantizeRowQ8_1Scalar(const float* x, int64_t n_cols, int8_t* qs, float* d, float* s);
void QuantizeRowQ8_KScalar(const float* x, int64_t n_cols, int8_t* qs, float* d,
                           int16_t* bsums);

// Tables defined by the per-ISA translation units.
void FillAvx2Kernels(IsaKernels* kernels);
void FillAvx2AttentionKernels(IsaKernels* kernels);  // attention_* and silu_mul
void FillAvx512VnniKernels(IsaKernels* kernels);
void FillAmxKernels(IsaKernels* kernels);

}  // namespace baton::kernels

#endif  // BATON_KERNELS_CPU_ISA_KERNELS_H_
