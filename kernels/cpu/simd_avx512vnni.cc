// The AVX-512 VNNI level of the CPU kernels (see isa_kernels.h): the AVX2 table with the MatMul
// tiles of matmul_tiles.inc and super_block_tiles.inc recompiled to use vpdpbusd and vpdpwssd
// (AVX512-VNNI on 256-bit vectors, AVX512-VL) for the integer dot products and the 32 vector
// registers of AVX-512 for bigger tiles. Only
// called after run-time detection (cpu_isa.h).
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/cpu/interleaved_rows.h"
#include "kernels/cpu/isa_kernels.h"
#include "kernels/cpu/super_block_lanes.h"

// Everything below may use AVX-512 F/BW/VL/DQ/VNNI besides AVX2, FMA and F16C. All headers are
// included above, so no inline function with external linkage is compiled for this target.
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni"))), apply_to = function)
#else
#pragma GCC target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni")
#endif

namespace baton::kernels {
namespace {

// 32 ymm registers: tiles of 4 x 4 accumulators + operands + temporaries.
constexpr int kTileA = 4;
constexpr int kTileW = 4;
constexpr int kDecodeW = 4;
constexpr int kPanelA = 4;
constexpr int kPanelW = 4;
// Super-block panel tiles: 6 x 2 x 2 int32 sums + operands.
constexpr int kSuperPanelA = 6;
// Lanes tiles: 8 x 3 accumulators + operands.
constexpr int kLanesTileA = 8;
// vpdpbusd takes a dword's products in one instruction.
constexpr bool kSumRunsInt16 = false;

#include "kernels/cpu/ordered_adds_avx2.inc"

inline __m256i DotU8S8(__m256i u, __m256i s) {
  return _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, s);
}
inline __m256i DotU8S8Acc(__m256i acc, __m256i u, __m256i s) {
  return _mm256_dpbusd_epi32(acc, u, s);
}
inline __m256i DotI16Acc(__m256i acc, __m256i a, __m256i b) {
  return _mm256_dpwssd_epi32(acc, a, b);
}

#include "kernels/cpu/matmul_tiles.inc"
#include "kernels/cpu/super_block_tiles.inc"

}  // namespace

void FillAvx512VnniKernels(IsaKernels* k) {
  k->isa = CpuIsa::kAvx512Vnni;
  k->matmul_f32 = MatMulRows<FloatKernel<FormatF32>>;
  k->matmul_f16 = MatMulRows<FloatKernel<FormatF16>>;
  k->matmul_bf16 = MatMulRows<FloatKernel<FormatBF16>>;
  k->matmul_q4_0 = PanelMatMulRows<Block32Kernel<FormatQ4_0>>;
  k->matmul_q4_1 = PanelMatMulRows<Block32Kernel<FormatQ4_1>>;
  k->matmul_q8_0 = PanelMatMulRows<Block32Kernel<FormatQ8_0>>;
  k->matmul_q5_0 = PanelMatMulRows<Block32Kernel<FormatQ5_0>>;
  k->matmul_q5_1 = PanelMatMulRows<Block32Kernel<FormatQ5_1>>;
  k->matmul_q4_k = SuperBlockMatMulRows<FormatQ4_K>;
  k->matmul_q5_k = SuperBlockMatMulRows<FormatQ5_K>;
  k->matmul_q6_k = SuperBlockMatMulRows<FormatQ6_K>;
  k->matmul_q2_k = SuperBlockMatMulRows<FormatQ2_K>;
  k->matmul_q3_k = SuperBlockMatMulRows<FormatQ3_K>;
  FillAvx512AttentionKernels(k);
}

}  // namespace baton::kernels

#if defined(__clang__)
#pragma clang attribute pop
#endif
