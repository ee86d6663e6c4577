// The table of SIMD kernels of one instruction-set level (cpu_isa.h), which the fast CPU backend
// (cpu_backend.cc) drives: it prepares the activations, splits output rows over its thread pool
// and calls these on each range. A null entry means "no kernel at this level": the backend then
// runs the scalar reference (reference_kernels.h) for that operation or dtype.
//
// MatMul kernels read activations quantized once per call into one of four forms, decided by the
// weight dtype and the level (ActivationFormatFor):
//   kF32   f32 rows as given                         (F32, F16, BF16 weights)
//   kQ8_1  int8 blocks of 32 with scale d,            (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 weights)
//          s = d * sum(q) and sum(q) per block
//   kQ8_K  int8 blocks of 256 with f32 scale d and    (Q2_K, Q3_K, Q4_K, Q5_K, Q6_K weights)
//          int16 sums of each 16 values
//   kBF16  rows rounded to BF16                      (BF16 weights where the level multiplies
//                                                     with vdpbf16ps: to_bf16_row is set)
// The value of element k of a quantized row is q[k] * d[block of k].
//
// Numerics: the fast kernels hold the accuracy contract (docs/ACCURACY.md): against the exact f32
// computation of the same weights, at least as accurate as llama.cpp. The activation quantizers
// are GGML's bit for bit: for kQ8_1 the backend stores d and s rounded to f16, as GGML's
// block_q8_1 does (the quantizers below produce the f32 values; q = round(x * 127 / max|x|)).
// Q8_0 weights take the same activations (GGML's q8_0 has the same values and d). The K-quants'
// Q8_K activations are not GGML's. The float MatMuls compute GGML's arithmetic, the super-block
// types (Q2_K..Q6_K) the whole-super-block arithmetic (super_block_tiles.inc: per super-block of
// 256, exact int32 sums and one f32 rounding, where GGML rounds eight lane sums); attention is
// FlashAttention-style with an online softmax in f32 (attention_avx2.cc, attention_avx512.cc),
// where GGML's default CPU path rounds the probabilities to f16.
// A MatMul output y[i, r] of the five kQ8_1 types (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0) follows the
// whole-block arithmetic at every SIMD level (packed_block32.h): per block b, P = the exact int32
// sum of the block's 32 products (Q4_0 weights are the signed values q - 8, Q5_0 weights q - 16),
// acc = fma(d_w * d_x, f32(P), acc) in block order (one accumulator), then y = acc, plus for
// Q4_1 / Q5_1 summs = fma(m_w, s_x, summs) over the blocks in order. GGML instead rounds eight
// 4-product lane sums per block into eight accumulators; one rounding per block is at least as
// accurate (docs/ACCURACY.md measures both against the exact computation), and it costs about
// half the instructions: a block's products add up in integer lanes and take one conversion and
// one fma per row and block, not eight (on a 2-core AMD EPYC, prefill of the default model
// 1.7x with AVX2 and 1.2-1.4x with AVX-512, batched decode of 32 sequences 1.3-1.6x and
// 1.35-1.4x; docs/CPU_SPEED.md).
// These five types have two implementations with the same bits: on the original rows
// (matmul_tiles.inc; all batch sizes), and on packed weights (packed_matmul_avx2.cc,
// packed_matmul_avx512.cc; packed_block32.h: a registered model's matrices, re-laid out once).
// The backend runs every batch of a registered matrix on the packed weights: a group of 16
// weight rows streams from memory as one contiguous run and stays in L1 while the activation rows
// pass over it, which beat the kernels on the original rows at every batch from 1 to 2048 rows.
// No AMX kernels yet: AMX's int32 tiles sum whole blocks, so the packed layout (an AMX B tile)
// would take them with the same bits, but no machine here has AMX to test them on.
// The super-block types (Q2_K..Q6_K) have kernels of the same bits for two layouts
// (super_block_tiles.inc): the original rows, and a registered matrix's copy with 8 rows in the
// vector lanes (super_block_lanes.h; MatMulArgs::super_block_lanes). On each, small batches
// unpack in registers (under 4 rows as stored, under 16 in lanes), and larger ones unpack 16
// rows per call into a panel with the rows in the vector lanes. The float kernels (F32, F16, BF16) read the original rows or a
// registered matrix's interleaved copy (interleaved_rows.h: groups of 4 rows by 64-byte units,
// one sequential stream per tile; MatMulArgs::interleave).
//
// Batch invariance: every kernel computes each y[i, r] with the same sequence of operations
// whatever tile or path (single-row decode kernel, packed weights, multi-row panels) it falls in, so a
// row's result depends only on that row and the weights.
//
// Levels (cpu_isa.h): avx2 (simd_avx2.cc, packed_matmul_avx2.cc, attention_avx2.cc);
// avx512-vnni (simd_avx512vnni.cc: the MatMul tiles of matmul_tiles.inc and
// super_block_tiles.inc on vpdpbusd,
// packed_matmul_avx512.cc for packed Q4_0/Q4_1/Q5_0/Q5_1/Q8_0, attention_avx512.cc for attention
// and SiLU); amx (the avx512-vnni table; no AMX kernels, see above).
//
// Thread-safety: the kernels are pure functions; disjoint row ranges may run concurrently.
#ifndef BATON_KERNELS_CPU_ISA_KERNELS_H_
#define BATON_KERNELS_CPU_ISA_KERNELS_H_

#include <algorithm>
#include <cstdint>

#include "kernels/backend.h"
#include "kernels/cpu/cpu_isa.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/dtype.h"

namespace baton::kernels {

enum class ActivationFormat { kF32, kQ8_1, kQ8_K, kBF16 };

struct IsaKernels;

// The activation form the MatMul kernel of `kernels` wants for weights of `dtype`.
ActivationFormat ActivationFormatFor(const IsaKernels& kernels, DType dtype);

inline constexpr int kQ8_1BlockSize = 32;
inline constexpr int kQ8_KBlockSize = 256;
// The attention kernels take heads of up to kAttentionMaxHeadDim values, and latent
// attention's of kAttentionLatentHeadDim (DeepSeek's latent 512 and RoPE 64): AttentionTakes.
inline constexpr int kAttentionMaxHeadDim = 256;
inline constexpr int kAttentionLatentHeadDim = 576;
inline constexpr bool AttentionTakes(int32_t head_dim) {
  return head_dim % 8 == 0 && (head_dim <= kAttentionMaxHeadDim ||
                               head_dim == kAttentionLatentHeadDim);
}

// Rows of x prepared for a MatMul.
struct MatMulActivations {
  const float* f32 = nullptr;      // kF32: [n, n_cols]
  const int8_t* qs = nullptr;      // kQ8_*: [n, n_cols], readable up to row RoundUp(n, 16)
  const float* d = nullptr;        // kQ8_*: [n, scale_stride] scale per block; rows n up to
                                   // RoundUp(n, 16) are readable and zero
  const float* s = nullptr;        // kQ8_1: [n, scale_stride] d * sum(q) per block, 0 past the end
  const int32_t* block_sums = nullptr;  // kQ8_1: [n, n_cols / 32] sum(q) per block (exact)
  const uint16_t* bf16 = nullptr;  // kBF16: [n, Bf16RowValues(n_cols)] x rounded to BF16, 0 past
                                   // n_cols
  const int16_t* bsums = nullptr;  // kQ8_K: [n, n_cols / 16] sum of q per 16 values
  int64_t scale_stride = 0;        // kQ8_*: a multiple of 8 >= blocks per row
};

// Floats per row of d and s for a row of n_cols in `format` (blocks rounded up to 8).
int64_t ActivationScaleStride(ActivationFormat format, int64_t n_cols);

// Activation rows per block of the float and BF16 tiles (rows of row_bytes, tiles of tile_rows):
// about 128 KiB, a whole number of tiles. Each block goes against all of a range's weight rows,
// so it stays in L2 while the weights stream past it.
inline int64_t L2BlockRows(int64_t row_bytes, int64_t tile_rows) {
  return std::max<int64_t>(1, (int64_t{128} << 10) / row_bytes / tile_rows) * tile_rows;
}

// Values per row of kBF16 activations: n_cols rounded up to the kernels' runs of 32.
inline int64_t Bf16RowValues(int64_t n_cols) { return (n_cols + 31) / 32 * 32; }

struct MatMulArgs {
  const uint8_t* w = nullptr;  // weight rows, row_bytes apart (or interleaved, below)
  int64_t row_bytes = 0;
  // The float kernels (F32, F16, BF16) also take their rows interleaved in groups of this many
  // (interleaved_rows.h); 1: as stored.
  int64_t interleave = 1;
  // The super-block kernels (Q2_K..Q6_K) also take their rows in lane groups
  // (super_block_lanes.h): w is then the lanes layout.
  bool super_block_lanes = false;
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
// Needs AttentionTakes(head_dim).
using AttentionPartialFn = void (*)(const float* q, int32_t kv_h, int32_t group, int32_t t_begin,
                                    int32_t t_end, const KvLayerView& kv, float scale,
                                    float* partial);

// attention_partial of n_q queries over one segment at once: query j's `group` heads at
// q + j * q_stride, over keys [t_begin, t_end[j]) (none where t_end[j] <= t_begin: its partial
// is not written), its partial at partial + j * partial_stride. Each query's partial is the same
// bits as attention_partial's; the K and V rows are read once for all of the queries.
using AttentionPartialQueriesFn = void (*)(const float* q, int64_t q_stride, int32_t n_q,
                                           const int32_t* t_end, int32_t kv_h, int32_t group,
                                           int32_t t_begin, const KvLayerView& kv, float scale,
                                           float* partial, int64_t partial_stride);

// Folds the next segment's partial [group, AttentionPartialSize(head_dim)] into state (same
// layout; starts as AttentionInitState made it). Partials must be folded in segment order.
using AttentionFoldFn = void (*)(const float* partial, int32_t group, int32_t head_dim,
                                 float* state);

// out [group, head_dim] = the normalized output of a state with every segment folded in.
using AttentionFinishFn = void (*)(const float* state, int32_t group, int32_t head_dim,
                                   float* out);

// The empty state: m = -inf, l = 0, acc = 0 for each head.
void AttentionInitState(int32_t group, int32_t head_dim, float* state);
// Folds each head's attention sink sinks[g] (a logit with no value, Backend::Attention) into
// state [group, AttentionPartialSize(head_dim)], after its segments and before the finish:
// GGML's correction, the state rescaled where the sink exceeds its max.
void AttentionFoldSinks(const float* sinks, int32_t group, int32_t head_dim, float* state);

using SiluMulFn = void (*)(const float* gate, const float* up, int64_t count, float* y);

// RoPE's rotation of n_heads heads at x by a position's angles (reference::RopeRotate's
// arithmetic, bit for bit; the parameters checked by the caller).
using RopeRotateFn = void (*)(float* x, int64_t n_heads, int64_t head_dim, const float* cos_sin,
                              const RopeParams& params);

// Rounds v[0..n) to the nearest f16 values (ties to even), kept as f32; for the kQ8_1 scales.
using RoundToF16Fn = void (*)(float* v, int64_t n);

// out[0..n) = x[0..n) rounded to f16 (F32ToF16's bits, NaNs included); for the KV cache's writes.
using ToF16RowFn = void (*)(const float* x, int64_t n, uint16_t* out);

// A row x[0..n_cols) as kBF16 activations: out[0..Bf16RowValues(n_cols)), x rounded to the
// nearest BF16 (ties to even), zeros past n_cols.
using ToBf16RowFn = void (*)(const float* x, int64_t n_cols, uint16_t* out);

struct IsaKernels {
  CpuIsa isa = CpuIsa::kScalar;
  MatMulRowsFn matmul_f32 = nullptr;
  MatMulRowsFn matmul_f16 = nullptr;
  MatMulRowsFn matmul_bf16 = nullptr;
  MatMulRowsFn matmul_q4_0 = nullptr;
  MatMulRowsFn matmul_q4_1 = nullptr;
  MatMulRowsFn matmul_q8_0 = nullptr;
  MatMulRowsFn matmul_q5_0 = nullptr;
  MatMulRowsFn matmul_q5_1 = nullptr;
  MatMulRowsFn matmul_q5_k = nullptr;
  MatMulRowsFn matmul_q4_k = nullptr;
  MatMulRowsFn matmul_q6_k = nullptr;
  MatMulRowsFn matmul_q2_k = nullptr;
  MatMulRowsFn matmul_q3_k = nullptr;
  // On packed weights (packed_block32.h; args.w the packed matrix, kQ8_1 activations), the same
  // bits as matmul_q4_0/_q4_1/_q5_0/_q5_1/_q8_0: the backend uses them for registered weights,
  // whatever the batch.
  MatMulRowsFn matmul_packed_q4_0 = nullptr;
  MatMulRowsFn matmul_packed_q4_1 = nullptr;
  MatMulRowsFn matmul_packed_q8_0 = nullptr;
  MatMulRowsFn matmul_packed_q5_0 = nullptr;
  MatMulRowsFn matmul_packed_q5_1 = nullptr;
  QuantizeQ8_1Fn quantize_q8_1 = nullptr;  // never null
  QuantizeQ8_KFn quantize_q8_k = nullptr;  // never null
  AttentionPartialFn attention_partial = nullptr;
  AttentionPartialQueriesFn attention_partial_queries = nullptr;  // set with attention_partial
  AttentionFoldFn attention_fold = nullptr;
  AttentionFinishFn attention_finish = nullptr;
  SiluMulFn silu_mul = nullptr;
  RopeRotateFn rope_rotate = nullptr;  // null: reference::RopeRotate
  RoundToF16Fn round_to_f16 = nullptr;  // null: the scalar conversions of kernels/half.h
  ToF16RowFn to_f16_row = nullptr;       // null: F32ToF16 element by element
  AddFn add = nullptr;                                       // never null
  RoundToF16UnboundedFn round_to_f16_unbounded = nullptr;  // never null
  RmsNormRowFn rms_norm_row = nullptr;                       // never null
  // Set with a matmul_bf16 that takes kBF16 activations (null: it takes kF32).
  ToBf16RowFn to_bf16_row = nullptr;
};

// The MatMul kernel of `kernels` for dtype, or null.
MatMulRowsFn MatMulKernelFor(const IsaKernels& kernels, DType dtype);
// The packed-weight MatMul kernel of `kernels` for dtype, or null.
MatMulRowsFn PackedMatMulKernelFor(const IsaKernels& kernels, DType dtype);

// The table of a level; `isa` must not exceed DetectCpuIsaUncapped() (CHECK).
const IsaKernels& KernelsFor(CpuIsa isa);

// Portable quantizers (the definition of the activation formats; the SIMD ones match them bit for
// bit).
void QuantizeRowQ8_1Scalar(const float* x, int64_t n_cols, int8_t* qs, float* d, float* s);
void QuantizeRowQ8_KScalar(const float* x, int64_t n_cols, int8_t* qs, float* d,
                           int16_t* bsums);
// sums[b] = the sum of a kQ8_1 row's values qs[32 b .. 32 b + 31], for b < n_cols / 32.
void Q8_1BlockSums(const int8_t* qs, int64_t n_cols, int32_t* sums);

// Tables defined by the per-ISA translation units.
void FillAvx2Kernels(IsaKernels* kernels);
void FillAvx2AttentionKernels(IsaKernels* kernels);  // attention_*, silu_mul, rope_rotate
void FillPackedAvx2Kernels(IsaKernels* kernels);     // matmul_packed_*
void FillAvx2ElementwiseKernels(IsaKernels* kernels);  // add, round_to_f16_unbounded, rms_norm_row
void FillAvx512VnniKernels(IsaKernels* kernels);
void FillAvx512AttentionKernels(IsaKernels* kernels);  // attention_partial*, silu_mul
void FillAmxKernels(IsaKernels* kernels);
void FillPackedAvx512Kernels(IsaKernels* kernels);  // matmul_packed_*
void FillBf16Avx512Kernels(IsaKernels* kernels);    // matmul_bf16, where AVX512_BF16 is present

}  // namespace baton::kernels

#endif  // BATON_KERNELS_CPU_ISA_KERNELS_H_
