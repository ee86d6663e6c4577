// The MatMul kernel on packed Q4_0 / Q4_1 / Q5_0 / Q5_1 / Q8_0 weights (packed_block32.h) at the
// AVX-512 VNNI level, in the whole-block arithmetic (isa_kernels.h): the same bits as the kernels
// on the original rows (matmul_tiles.inc) and as MatMulPackedScalar<dtype>. The backend runs
// every batch of a registered matrix on it.
//
// A zmm holds one dword of each of a group's 16 rows (packed vector l), so a vpdpbusd of it with
// the activation dword l broadcast adds that dword's 4 products of every row to the row's int32
// lane; the 8 vpdpbusd of a block leave each row's exact block sum P in its lane, and
// acc = fma(d_w * d_x, f32(P), acc) takes one conversion and one fma per 16 rows and block.
// A tile is R activation rows against one group, over all blocks: per block, each weight vector
// is loaded and unpacked once for the R rows. The u8 x s8 product wants unsigned weights: the
// nibble types take their unsigned values, Q8_0 its values + 128 (one xor), and the sums start
// from -kStart * (the activation block's sum, MatMulActivations::block_sums), so P is the signed
// sum exactly. Integer sums may be split into independent chains and added up in
// any order (one row uses 4 chains, so that the vpdpbusd latency overlaps). Q4_1's and Q5_1's minimum term, an fma
// chain over the blocks, is a second pass over the group (from L1).
//
// One activation row (decode) streams each group from memory once (prefetched 4 blocks ahead).
// More rows go in passes of 32 over the thread's groups (their values stay in L1, each group comes
// from L2 once per pass), R = 8 rows per tile while the group stays in L1.
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "kernels/cpu/isa_kernels.h"
#include "kernels/cpu/packed_block32.h"

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni"))), apply_to = function)
#else
#pragma GCC target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni")
#endif
#if !defined(__clang__)  // a GCC-only warning, from the intrinsics headers' undefined vectors
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#pragma GCC diagnostic ignored "-Wuninitialized"

namespace baton::kernels {
namespace {

constexpr int kRows = kPackedGroupRows;

template <DType kDType>
using Packed = PackedGroupBlock<kDType>;

// What the unsigned operand of the vpdpbusd exceeds the signed weight by: Q4_0's and Q5_0's
// offsets, and 128 for Q8_0 (its values flipped to unsigned by an xor of the sign bit).
template <DType kDType>
constexpr int kStart = Packed<kDType>::kQ8 ? 128 : Packed<kDType>::kOffset;

// Activation rows per tile beyond a few: R accumulators and R block sums with the weight
// vectors fit the 32 zmm registers.
constexpr int kTileRows = 8;

// Independent int32 chains per row for a tile of R rows: enough rows or chains to cover the
// vpdpbusd latency.
constexpr int ChainsFor(int R) { return R == 1 ? 4 : R < 4 ? 2 : 1; }

inline __m512 LoadHalf16(const uint8_t* p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}

inline __m512i BroadcastDword(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, sizeof v);
  return _mm512_set1_epi32(v);
}

// Weight vector l (the operand of activation dword l) of a group block, unsigned: Q8_0's vector l
// + 128; for the nibble types, vector l % 4's low (l < 4: values 4l + t) or high nibbles
// (values 16 + 4(l - 4) + t), plus 16 where Q5's fifth bit is set.
template <DType kDType>
inline __m512i WeightVector(const uint8_t* blk, int l) {
  using P = Packed<kDType>;
  if constexpr (P::kQ8) {
    return _mm512_xor_si512(_mm512_loadu_si512(blk + 64 * l), _mm512_set1_epi8(-128));
  } else {
    const __m512i w = _mm512_loadu_si512(blk + 64 * (l % 4));
    const __m512i low = _mm512_set1_epi8(0x0f);
    __m512i v = l < 4 ? _mm512_and_si512(w, low) : _mm512_and_si512(_mm512_srli_epi16(w, 4), low);
    if constexpr (P::kFifthBit) {  // mask 2 (l % 4) + l / 4
      __mmask64 mask;
      std::memcpy(&mask, blk + P::kFifthOffset + 8 * (2 * (l % 4) + l / 4), sizeof mask);
      v = _mm512_mask_add_epi8(v, mask, v, _mm512_set1_epi8(16));
    }
    return v;
  }
}

// p[i] = the block sums P of the group's 16 rows against activation rows i < R, whose block is
// at x + i * x_stride; start[i * start_stride] is row i's block sum (null: none), which the
// sums start from times -kStart.
template <DType kDType, int R>
inline void BlockSums(const uint8_t* blk, const int8_t* x, int64_t x_stride, const int32_t* start,
                      int64_t start_stride, __m512i (&p)[R]) {
  constexpr int kChains = ChainsFor(R);
  __m512i c[R][kChains];
#pragma GCC unroll 8
  for (int i = 0; i < R; ++i) {
    c[i][0] = start != nullptr ? _mm512_set1_epi32(-kStart<kDType> * start[i * start_stride])
                               : _mm512_setzero_si512();
#pragma GCC unroll 4
    for (int k = 1; k < kChains; ++k) c[i][k] = _mm512_setzero_si512();
  }
#pragma GCC unroll 8
  for (int l = 0; l < 8; ++l) {
    const __m512i w = WeightVector<kDType>(blk, l);
#pragma GCC unroll 8
    for (int i = 0; i < R; ++i) {
      __m512i& chain = c[i][l % kChains];
      chain = _mm512_dpbusd_epi32(chain, w, BroadcastDword(x + i * x_stride + 4 * l));
    }
  }
#pragma GCC unroll 8
  for (int i = 0; i < R; ++i) {
    p[i] = c[i][0];
#pragma GCC unroll 4
    for (int k = 1; k < kChains; ++k) p[i] = _mm512_add_epi32(p[i], c[i][k]);
  }
}

// Q4_1's and Q5_1's minimum term of activation rows [i0, i0 + R): y[i] += the fma chain of
// m_w * s_x over the blocks.
template <DType kDType, int R>
inline void AddMinSums(const MatMulArgs& a, const uint8_t* group, int64_t i0, __m512 (&y)[R]) {
  using P = Packed<kDType>;
  const int64_t nb = a.n_cols / 32;
  const float* xs = a.x.s + i0 * a.x.scale_stride;
  __m512 summs[R];
#pragma GCC unroll 8
  for (int i = 0; i < R; ++i) summs[i] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const __m512 m = LoadHalf16(group + b * P::kBlockBytes + P::kMinOffset);
#pragma GCC unroll 8
    for (int i = 0; i < R; ++i) {
      summs[i] = _mm512_fmadd_ps(m, _mm512_set1_ps(xs[i * a.x.scale_stride + b]), summs[i]);
    }
  }
#pragma GCC unroll 8
  for (int i = 0; i < R; ++i) y[i] = _mm512_add_ps(y[i], summs[i]);
}

// y of activation rows [i0, i0 + R) against group g, of whose rows the first `valid` exist.
// `stream`: this tile is the first over the group, so it prefetches.
template <DType kDType, int R>
void Tile(const MatMulArgs& a, const int32_t* starts, int64_t g, int64_t i0, int valid,
          bool stream) {
  using P = Packed<kDType>;
  const int64_t nb = a.n_cols / 32;
  const int64_t ss = a.x.scale_stride;
  const uint8_t* group = a.w + g * nb * P::kBlockBytes;
  const int8_t* xq = a.x.qs + i0 * a.n_cols;
  const float* xd = a.x.d + i0 * ss;
  const int32_t* start = starts != nullptr ? starts + i0 * nb : nullptr;
  __m512 acc[R];
#pragma GCC unroll 8
  for (int i = 0; i < R; ++i) acc[i] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* blk = group + b * P::kBlockBytes;
    if (stream) {
      const char* ahead = reinterpret_cast<const char*>(blk + 4 * P::kBlockBytes);
#pragma GCC unroll 16
      for (int line = 0; line < P::kBlockBytes; line += 64) _mm_prefetch(ahead + line, _MM_HINT_T0);
    }
    __m512i p[R];
    BlockSums<kDType, R>(blk, xq + 32 * b, a.n_cols, start != nullptr ? start + b : nullptr, nb,
                         p);
    const __m512 dw = LoadHalf16(blk + P::kScaleOffset);
#pragma GCC unroll 8
    for (int i = 0; i < R; ++i) {
      const __m512 scale = _mm512_mul_ps(dw, _mm512_set1_ps(xd[i * ss + b]));
      acc[i] = _mm512_fmadd_ps(scale, _mm512_cvtepi32_ps(p[i]), acc[i]);
    }
  }
  if constexpr (P::kHasMin) AddMinSums<kDType, R>(a, group, i0, acc);
  const __mmask16 store = static_cast<__mmask16>((1u << valid) - 1);
#pragma GCC unroll 8
  for (int i = 0; i < R; ++i) {
    _mm512_mask_storeu_ps(a.y + (i0 + i) * a.n_rows + g * kRows, store, acc[i]);
  }
}

// Activation rows [i, i_end) against group g, R rows per tile, then the rest in one smaller tile.
template <DType kDType, int R>
void Tiles(const MatMulArgs& a, const int32_t* starts, int64_t g, int valid, int64_t i,
           int64_t i_end, bool stream) {
  for (; i + R <= i_end; i += R, stream = false) Tile<kDType, R>(a, starts, g, i, valid, stream);
  if constexpr (R > 1) {
    if (i < i_end) Tiles<kDType, R - 1>(a, starts, g, valid, i, i_end, stream);
  }
}

// Activation rows per pass over the thread's groups: their quantized values stay in L1 while
// each group comes from L2 (or memory, on the first pass) once per pass.
constexpr int64_t kRowsPerPass = 32;

template <DType kDType>
void MatMulPacked(const MatMulArgs& a, int64_t r_begin, int64_t r_end) {
  const int32_t* starts = kStart<kDType> != 0 ? a.x.block_sums : nullptr;
  for (int64_t i0 = 0; i0 < a.n; i0 += kRowsPerPass) {
    const int64_t i_end = std::min(a.n, i0 + kRowsPerPass);
    for (int64_t r0 = r_begin; r0 < r_end; r0 += kRows) {
      const int valid = static_cast<int>(std::min<int64_t>(kRows, r_end - r0));
      Tiles<kDType, kTileRows>(a, starts, r0 / kRows, valid, i0, i_end, /*stream=*/i0 == 0);
    }
  }
}

}  // namespace

void FillPackedAvx512Kernels(IsaKernels* k) {
  k->matmul_packed_q4_0 = MatMulPacked<DType::kQ4_0>;
  k->matmul_packed_q4_1 = MatMulPacked<DType::kQ4_1>;
  k->matmul_packed_q8_0 = MatMulPacked<DType::kQ8_0>;
  k->matmul_packed_q5_0 = MatMulPacked<DType::kQ5_0>;
  k->matmul_packed_q5_1 = MatMulPacked<DType::kQ5_1>;
}

}  // namespace baton::kernels

#if defined(__clang__)
#pragma clang attribute pop
#endif
