// The MatMul kernel on BF16 weights at the AVX-512 levels, on CPUs with AVX512_BF16: GGML's
// arithmetic there (ggml_vec_dot_bf16), the activations rounded to BF16 and multiplied in pairs
// by vdpbf16ps, two products per f32 lane and instruction (twice the f32 FMA's).
//
// The activations come prepared as kBF16 (isa_kernels.h: ToBf16Row, once per product by the
// backend). For output y[i, r], with w the row's BF16 values and x' = BF16(x[i]) (round to
// nearest even):
//   acc (16 f32 lanes) from 0; for each run of 32 columns k in order (the last one padded with
//   zeros): acc = vdpbf16ps(acc, w[k .. k + 31], x'[k .. k + 31]), lane l taking the products of
//   columns k + 2l and k + 2l + 1;
//   y = the sum of acc's lanes (_mm512_reduce_add_ps's fixed tree).
// The same for any number of activation rows, and on rows as stored or interleaved
// (interleaved_rows.h): the bits of one row never depend on the batch.
//
// Tiles: kTileA activation rows x kTileW weight rows (4 x 4 zmm accumulators) over activation rows
// in blocks that stay in L2; one activation row (decode) against kTileW weight rows.
#include <immintrin.h>

#include <algorithm>
#include <cstdint>

#include "kernels/cpu/interleaved_rows.h"
#include "kernels/cpu/isa_kernels.h"

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512bf16"))), apply_to = function)
#else
#pragma GCC target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512bf16")
#endif
#if !defined(__clang__)  // a GCC-only warning, from the intrinsics headers' undefined vectors
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#pragma GCC diagnostic ignored "-Wuninitialized"

namespace baton::kernels {
namespace {

constexpr int kTileA = 4;
constexpr int kTileW = 4;
constexpr int64_t kRun = 32;  // columns per vdpbf16ps: one 64-byte unit of BF16 values

void ToBf16Row(const float* x, int64_t n_cols, uint16_t* out) {
  for (int64_t k = 0; k < Bf16RowValues(n_cols); k += kRun) {
    const int64_t left = n_cols - k;
    const __mmask16 lo = left >= 16 ? 0xffff : static_cast<__mmask16>((1u << left) - 1);
    const __mmask16 hi = left >= 32   ? 0xffff
                         : left <= 16 ? 0
                                      : static_cast<__mmask16>((1u << (left - 16)) - 1);
    const __m512bh bf = _mm512_cvtne2ps_pbh(_mm512_maskz_loadu_ps(hi, x + k + 16),
                                            _mm512_maskz_loadu_ps(lo, x + k));
    _mm512_storeu_si512(out + k, reinterpret_cast<const __m512i&>(bf));
  }
}

// Weight row r's run u (32 values; the last run of a row as stored masked to the row's end).
inline __m512i WeightRun(const RowBlocks& w, int64_t u, int64_t n_cols) {
  const uint8_t* p = w.first + u * w.stride;
  const int64_t left = n_cols - u * kRun;
  if (left >= kRun) return _mm512_loadu_si512(p);
  return _mm512_maskz_loadu_epi16(static_cast<__mmask32>((uint64_t{1} << left) - 1), p);
}

// y of activation rows [i0, i0 + NA) against weight rows [r0, r0 + NW).
template <int NA, int NW>
void Tile(const MatMulArgs& a, const uint16_t* x, int64_t i0, int64_t r0) {
  const int64_t runs = Bf16RowValues(a.n_cols) / kRun;
  RowBlocks w[NW];
#pragma GCC unroll 4
  for (int j = 0; j < NW; ++j) w[j] = LocateRow(a, r0 + j, kFloatInterleaveUnitBytes);
  __m512 acc[NA][NW];
#pragma GCC unroll 4
  for (int i = 0; i < NA; ++i) {
#pragma GCC unroll 4
    for (int j = 0; j < NW; ++j) acc[i][j] = _mm512_setzero_ps();
  }
  for (int64_t u = 0; u < runs; ++u) {
    __m512i wv[NW];
#pragma GCC unroll 4
    for (int j = 0; j < NW; ++j) wv[j] = WeightRun(w[j], u, a.n_cols);
#pragma GCC unroll 4
    for (int i = 0; i < NA; ++i) {
      const __m512i xv = _mm512_loadu_si512(x + ((i0 + i) * runs + u) * kRun);
#pragma GCC unroll 4
      for (int j = 0; j < NW; ++j) {
        acc[i][j] = _mm512_dpbf16_ps(acc[i][j], reinterpret_cast<const __m512bh&>(wv[j]),
                                     reinterpret_cast<const __m512bh&>(xv));
      }
    }
  }
#pragma GCC unroll 4
  for (int i = 0; i < NA; ++i) {
#pragma GCC unroll 4
    for (int j = 0; j < NW; ++j) {
      a.y[(i0 + i) * a.n_rows + r0 + j] = _mm512_reduce_add_ps(acc[i][j]);
    }
  }
}

// Activation rows [i0, i_end) against weight rows [r, r + NW): kTileA rows at a time, then one.
template <int NW>
void RowTiles(const MatMulArgs& a, const uint16_t* x, int64_t i0, int64_t i_end, int64_t r) {
  int64_t i = i0;
  for (; i + kTileA <= i_end; i += kTileA) Tile<kTileA, NW>(a, x, i, r);
  for (; i < i_end; ++i) Tile<1, NW>(a, x, i, r);
}

void MatMulBf16(const MatMulArgs& a, int64_t r_begin, int64_t r_end) {
  const uint16_t* x = a.x.bf16;
  const int64_t block = L2BlockRows(Bf16RowValues(a.n_cols) * 2, kTileA);
  for (int64_t i0 = 0; i0 < a.n; i0 += block) {
    const int64_t i_end = std::min(a.n, i0 + block);
    int64_t r = r_begin;
    for (; r + kTileW <= r_end; r += kTileW) RowTiles<kTileW>(a, x, i0, i_end, r);
    for (; r < r_end; ++r) RowTiles<1>(a, x, i0, i_end, r);
  }
}

}  // namespace

void FillBf16Avx512Kernels(IsaKernels* k) {
  k->matmul_bf16 = MatMulBf16;
  k->to_bf16_row = ToBf16Row;
}

}  // namespace baton::kernels

#if defined(__clang__)
#pragma clang attribute pop
#endif
