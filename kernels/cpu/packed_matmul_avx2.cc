// The MatMul kernel on packed Q4_0 / Q4_1 / Q5_0 / Q5_1 / Q8_0 weights (packed_block32.h) at the
// AVX2 level: GGML's arithmetic, the same bits as the AVX2 kernels on the original rows
// (matmul_tiles.inc) and as MatMulPackedScalar. The backend runs every batch of a registered
// matrix on it.
//
// A 256-bit vector holds dword l of 8 rows: half h (rows 8h..8h+7) of a group's 64-byte vector l.
// One activation row against one half of a group: per block, for each dword l, vpmaddubsw +
// vpmaddwd of the half vector with the activation dword broadcast gives GGML's lane sum P[l] of
// the 8 rows in the 8 lanes, and acc[l] = fma(d_w * d_x, f32(P[l]), acc[l]) with acc[l] one ymm
// per lane; at the end GGML's hsum_float_8 is 7 vertical adds. The 8 accumulators and the
// operands fill the 16 ymm registers, so the two halves of a group are two passes; the second
// reads the group from L1, where the first brought it.
//
// Against the kernels on the original rows: the weights stream from memory as one contiguous run
// per thread (not one per row, whose gathers of the scales stalled on every cache miss), the
// nibbles of 8 rows unpack in one instruction, and the scales and Q4_1's minima take one vector
// operation for 8 rows instead of one per row.
//
// Signed weights: Q8_0 takes |w| against x with w's sign (vpmaddubsw multiplies u8 by s8; at most
// 2 * 128 * 127 per int16 pair: no saturation); Q4_0 (nibble - 8) and Q5_0 (value - 16) take the
// unsigned value and subtract 8 (16) * (sum of the activation dword): exact, the same sums.
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "kernels/cpu/isa_kernels.h"
#include "kernels/cpu/packed_block32.h"

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c"))), apply_to = function)
#else
#pragma GCC target("avx2,fma,f16c")
#endif

namespace baton::kernels {
namespace {

#include "kernels/cpu/dot_u8s8_avx2.inc"
#include "kernels/cpu/fifth_bits_avx2.inc"

constexpr int kRows = kPackedGroupRows;
constexpr int kHalfRows = kRows / 2;  // one ymm lane per row

template <DType kDType>
using Packed = PackedGroupBlock<kDType>;

inline __m256 LoadHalf8(const uint8_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

inline __m256i Load256(const uint8_t* p) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
}

inline __m256i BroadcastDword(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, sizeof v);
  return _mm256_set1_epi32(v);
}

// kOffset * (the sum of each of the 8 dwords of activation block xq), for Q4_0 and Q5_0.
template <DType kDType>
inline void OffsetSums(const int8_t* xq, int32_t (&offset)[8]) {
  const __m256i x = Load256(reinterpret_cast<const uint8_t*>(xq));
  const __m256i sums = DotU8S8(_mm256_set1_epi8(1), x);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(offset),
                      _mm256_mullo_epi32(sums, _mm256_set1_epi32(Packed<kDType>::kOffset)));
}

// GGML's lane sums P[0..8) of half h of a group block against activation block xq.
template <DType kDType>
inline void LaneSums(const uint8_t* blk, int h, const int8_t* xq, __m256i (&p)[8]) {
  using P = Packed<kDType>;
  if constexpr (P::kQ8) {
#pragma GCC unroll 8
    for (int l = 0; l < 8; ++l) {
      const __m256i w = Load256(blk + 64 * l + 32 * h);
      p[l] = DotU8S8(_mm256_abs_epi8(w), _mm256_sign_epi8(BroadcastDword(xq + 4 * l), w));
    }
  } else {
    const __m256i low = _mm256_set1_epi8(0x0f);
#pragma GCC unroll 4
    for (int v = 0; v < 4; ++v) {
      const __m256i w = Load256(blk + 64 * v + 32 * h);
      __m256i lo = _mm256_and_si256(w, low);                         // values 4v + t
      __m256i hi = _mm256_and_si256(_mm256_srli_epi16(w, 4), low);  // values 16 + 4v + t
      if constexpr (P::kFifthBit) {  // masks 2v and 2v + 1; half h is their dword h
        lo = _mm256_or_si256(lo, FifthBits32(blk + P::kFifthOffset + 16 * v + 4 * h));
        hi = _mm256_or_si256(hi, FifthBits32(blk + P::kFifthOffset + 16 * v + 8 + 4 * h));
      }
      p[v] = DotU8S8(lo, BroadcastDword(xq + 4 * v));
      p[v + 4] = DotU8S8(hi, BroadcastDword(xq + 16 + 4 * v));
    }
    if constexpr (P::kOffset != 0) {
      int32_t offset[8];
      OffsetSums<kDType>(xq, offset);
#pragma GCC unroll 8
      for (int l = 0; l < 8; ++l) p[l] = _mm256_sub_epi32(p[l], _mm256_set1_epi32(offset[l]));
    }
  }
}

// Activation row i against rows [8h, 8h + valid) of group g (valid <= 8): y[i, those rows].
template <DType kDType>
void DirectHalf(const MatMulArgs& a, int64_t i, int64_t g, int h, int valid) {
  using P = Packed<kDType>;
  const int64_t nb = a.n_cols / 32;
  const int64_t ss = a.x.scale_stride;
  const uint8_t* group = a.w + g * nb * P::kBlockBytes;
  const int8_t* xq = a.x.qs + i * a.n_cols;
  const float* xd = a.x.d + i * ss;
  const float* xs = a.x.s + i * ss;
  __m256 acc[8];
#pragma GCC unroll 8
  for (int l = 0; l < 8; ++l) acc[l] = _mm256_setzero_ps();
  __m256 summs = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* blk = group + b * P::kBlockBytes;
    if (h == 0) {  // the first pass streams the group from memory
      const char* ahead = reinterpret_cast<const char*>(blk + 4 * P::kBlockBytes);
#pragma GCC unroll 16
      for (int line = 0; line < P::kBlockBytes; line += 64) _mm_prefetch(ahead + line, _MM_HINT_T0);
    }
    __m256i p[8];
    LaneSums<kDType>(blk, h, xq + 32 * b, p);
    const __m256 scale = _mm256_mul_ps(LoadHalf8(blk + P::kScaleOffset + 16 * h),
                                       _mm256_set1_ps(xd[b]));
#pragma GCC unroll 8
    for (int l = 0; l < 8; ++l) acc[l] = _mm256_fmadd_ps(scale, _mm256_cvtepi32_ps(p[l]), acc[l]);
    if constexpr (P::kHasMin) {
      summs = _mm256_fmadd_ps(LoadHalf8(blk + P::kMinOffset + 16 * h), _mm256_set1_ps(xs[b]),
                              summs);
    }
  }
  const __m256 even = _mm256_add_ps(_mm256_add_ps(acc[0], acc[4]), _mm256_add_ps(acc[2], acc[6]));
  const __m256 odd = _mm256_add_ps(_mm256_add_ps(acc[1], acc[5]), _mm256_add_ps(acc[3], acc[7]));
  __m256 y = _mm256_add_ps(even, odd);
  if constexpr (P::kHasMin) y = _mm256_add_ps(y, summs);
  float* out = a.y + i * a.n_rows + g * kRows + kHalfRows * h;
  if (valid == kHalfRows) {
    _mm256_storeu_ps(out, y);
  } else {
    alignas(32) float lanes[kHalfRows];
    _mm256_store_ps(lanes, y);
    std::memcpy(out, lanes, static_cast<size_t>(valid) * sizeof(float));
  }
}

template <DType kDType>
void MatMulPackedDirect(const MatMulArgs& a, int64_t r_begin, int64_t r_end) {
  for (int64_t r0 = r_begin; r0 < r_end; r0 += kRows) {
    const int valid = static_cast<int>(std::min<int64_t>(kRows, r_end - r0));
    for (int h = 0; kHalfRows * h < valid; ++h) {
      const int valid_half = std::min(kHalfRows, valid - kHalfRows * h);
      for (int64_t i = 0; i < a.n; ++i) DirectHalf<kDType>(a, i, r0 / kRows, h, valid_half);
    }
  }
}

}  // namespace

void FillPackedAvx2Kernels(IsaKernels* k) {
  // Q8_0's sign flips (|w| and sign(x, w) per activation row and dword) make the packed kernel
  // slower than the panels on the original rows beyond 4 rows (2-core AMD EPYC, AVX2: 0.89x at 8
  // rows, 0.78x at 512; 1.2x at 1 row).
  k->packed_q8_0_max_rows = 4;
  k->matmul_packed_q4_0 = MatMulPackedDirect<DType::kQ4_0>;
  k->matmul_packed_q4_1 = MatMulPackedDirect<DType::kQ4_1>;
  k->matmul_packed_q8_0 = MatMulPackedDirect<DType::kQ8_0>;
  k->matmul_packed_q5_0 = MatMulPackedDirect<DType::kQ5_0>;
  k->matmul_packed_q5_1 = MatMulPackedDirect<DType::kQ5_1>;
}

}  // namespace baton::kernels

#if defined(__clang__)
#pragma clang attribute pop
#endif
