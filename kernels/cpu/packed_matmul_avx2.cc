// The MatMul kernel on packed Q4_0 / Q4_1 / Q5_0 / Q5_1 / Q8_0 weights (packed_block32.h) at the
// AVX2 level, in the whole-block arithmetic (isa_kernels.h): the same bits as the kernels on the
// original rows (matmul_tiles.inc) and as MatMulPackedScalar<dtype>. The backend runs every batch
// of a registered matrix on it.
//
// A 256-bit vector holds dword l of 8 rows: half h (rows 8h..8h+7) of a group's 64-byte vector l.
// A tile is R activation rows against one or both halves of a group, over all blocks. Per block,
// the tile loads and unpacks each weight vector once for its R rows; per activation row, a
// vpmaddubsw of the vector with the activation dword broadcast, the products added up in int16
// lanes (AddInt16), then one vpmaddwd leaves the block sum P of each of the 8 rows in its lane,
// and acc = fma(d_w * d_x, f32(P), acc): one conversion and one fma per 8 rows and block.
//   int16 range: a lane adds 16 products; |w| <= 15 (Q4) and |x| <= 127 give at most 30480.
//   Q5's values (<= 31) add up as two sums of 8 products (the low and the high nibbles).
//   Q8_0 takes |w| against x with w's sign (pairs up to 2 * 128 * 127) and a vpmaddwd per vector.
//   Q4_0 (nibble - 8) and Q5_0 (value - 16) take the unsigned values and subtract 8 (16) times
//   the activation block's sum (MatMulActivations::block_sums): exact, the same P.
// Q4_1's and Q5_1's minimum term, an fma chain over the blocks, is a second pass over the group
// (from L1), which leaves the main loop's registers to the rows.
//
// One activation row (decode) takes both halves in one pass, so each byte is used once as it
// streams from memory (prefetched 4 blocks ahead). More rows go in passes of 32 over the thread's
// groups (their values stay in L1, each group comes from L2 once per pass; 1.5x at 512 rows);
// within a pass, tiles of 4 rows against both halves of a group, while the group stays in L1:
// each activation dword broadcast serves 16 weight rows. (The tile's 16 accumulators and sums
// then spill, and still it is 1.14-1.16x faster for Q4_0 and Q4_1 and 1.05-1.08x for Q8_0 than
// tiles of 4 rows against one half; 3 or 5 rows against both did less well.)
// Q5_0 and Q5_1 with more rows than one tile unpack each group once per pass into a panel of
// bytes that the pass's tiles of 2 rows against both halves read (PassQ5Panel; a tile of 3 rows
// spent as much on the fifth bits as on products; from the panel, 2 rows against both halves are
// 1.06-1.23x faster than 4 rows against one half at 5-32 rows, 1.03-1.05x at 512).
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/cpu/isa_kernels.h"
#include "kernels/cpu/packed_block32.h"

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c"))), apply_to = function)
#else
#pragma GCC target("avx2,fma,f16c")
#endif

namespace baton::kernels {
namespace {

#include "kernels/cpu/ordered_adds_avx2.inc"
#include "kernels/cpu/fifth_bits_avx2.inc"

constexpr int kRows = kPackedGroupRows;
constexpr int kHalfRows = kRows / 2;  // one ymm lane per row

template <DType kDType>
using Packed = PackedGroupBlock<kDType>;

// Activation rows per tile beyond one: 4 against both halves of a group; 3 against one half for
// the Q5 types unpacking their values (their accumulators, two int16 sums each and the unpacked
// weights fill the 16 ymm registers).
template <DType kDType>
constexpr int kTileRows = Packed<kDType>::kFifthBit ? 3 : 4;

inline __m256 LoadHalf8(const uint8_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

inline __m256i Load256(const void* p) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
}

inline __m256i BroadcastDword(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, sizeof v);
  return _mm256_set1_epi32(v);
}

// Block sums of Q8_0: p[i][hh] = P of rows 8 (h0 + hh) + lane against the activation block at
// x + i * x_stride.
template <int R, int kHalves>
inline void BlockSumsQ8(const uint8_t* blk, int h0, const int8_t* x, int64_t x_stride,
                        __m256i (&p)[R][kHalves]) {
  const __m256i ones16 = _mm256_set1_epi16(1);
#pragma GCC unroll 8
  for (int l = 0; l < 8; ++l) {
#pragma GCC unroll 2
    for (int hh = 0; hh < kHalves; ++hh) {
      const __m256i w = Load256(blk + 64 * l + 32 * (h0 + hh));
      const __m256i w_abs = _mm256_abs_epi8(w);
#pragma GCC unroll 4
      for (int i = 0; i < R; ++i) {
        const __m256i xs = _mm256_sign_epi8(BroadcastDword(x + i * x_stride + 4 * l), w);
        const __m256i d = _mm256_madd_epi16(_mm256_maddubs_epi16(w_abs, xs), ones16);
        p[i][hh] = l == 0 ? d : _mm256_add_epi32(p[i][hh], d);
      }
    }
  }
}

// Asks for the block 4 blocks after blk in L1: a first pass over a group streams it from memory.
// Always inlined: GCC drops calls to a function that only prefetches.
template <DType kDType>
[[gnu::always_inline]] inline void PrefetchBlockAhead(const uint8_t* blk) {
  const char* ahead = reinterpret_cast<const char*>(blk + 4 * Packed<kDType>::kBlockBytes);
#pragma GCC unroll 16
  for (int line = 0; line < Packed<kDType>::kBlockBytes; line += 64) {
    _mm_prefetch(ahead + line, _MM_HINT_T0);
  }
}

// A half group's values of one block, unpacked to one byte each (Q5's fifth bits included):
// vector v (values 4v + t of the 8 rows), then vector 4 + v (values 16 + 4v + t).
constexpr int kUnpackedHalfBytes = 8 * 32;

// The values of vector v of half h of a packed block, one byte each: lo = values 4v + t,
// hi = values 16 + 4v + t of the 8 rows.
template <DType kDType>
inline void UnpackVector(const uint8_t* blk, int h, int v, __m256i* lo, __m256i* hi) {
  using P = Packed<kDType>;
  const __m256i low = _mm256_set1_epi8(0x0f);
  const __m256i w = Load256(blk + 64 * v + 32 * h);
  *lo = _mm256_and_si256(w, low);
  *hi = _mm256_and_si256(_mm256_srli_epi16(w, 4), low);
  if constexpr (P::kFifthBit) {  // masks 2v and 2v + 1; half h is their dword h
    *lo = _mm256_or_si256(*lo, FifthBits32(blk + P::kFifthOffset + 16 * v + 4 * h));
    *hi = _mm256_or_si256(*hi, FifthBits32(blk + P::kFifthOffset + 16 * v + 8 + 4 * h));
  }
}

// The unpacked values of half h of a packed block into out (kUnpackedHalfBytes).
template <DType kDType>
inline void UnpackHalfBlock(const uint8_t* blk, int h, uint8_t* out) {
#pragma GCC unroll 4
  for (int v = 0; v < 4; ++v) {
    __m256i lo, hi;
    UnpackVector<kDType>(blk, h, v, &lo, &hi);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + 32 * v), lo);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + 32 * (4 + v)), hi);
  }
}

// Block sums of the nibble types (unsigned values; Q4_0's and Q5_0's offsets come later), the
// values unpacked from the packed block, or (kFromPanel, both halves) read from `panel`, the
// block's UnpackHalfBlock of half 0 and then of half 1: the same values, so the same sums.
template <DType kDType, int R, int kHalves, bool kFromPanel = false>
inline void BlockSumsNibbles(const uint8_t* blk, const uint8_t* panel, int h0, const int8_t* x,
                             int64_t x_stride, __m256i (&p)[R][kHalves]) {
  using P = Packed<kDType>;
  static_assert(!kFromPanel || kHalves == 2);
  const __m256i ones16 = _mm256_set1_epi16(1);
  // int16 sums; Q4 keeps all in lo_sum.
  __m256i lo_sum[R][kHalves], hi_sum[R][kHalves];
#pragma GCC unroll 4
  for (int v = 0; v < 4; ++v) {
#pragma GCC unroll 2
    for (int hh = 0; hh < kHalves; ++hh) {
      const int h = h0 + hh;
      __m256i lo, hi;  // values 4v + t, values 16 + 4v + t
      if constexpr (kFromPanel) {
        lo = Load256(panel + kUnpackedHalfBytes * hh + 32 * v);
        hi = Load256(panel + kUnpackedHalfBytes * hh + 32 * (4 + v));
      } else {
        UnpackVector<kDType>(blk, h, v, &lo, &hi);
      }
#pragma GCC unroll 4
      for (int i = 0; i < R; ++i) {
        const int8_t* xi = x + i * x_stride;
        const __m256i a = _mm256_maddubs_epi16(lo, BroadcastDword(xi + 4 * v));
        const __m256i b = _mm256_maddubs_epi16(hi, BroadcastDword(xi + 16 + 4 * v));
        if constexpr (P::kFifthBit) {
          lo_sum[i][hh] = v == 0 ? a : AddInt16(lo_sum[i][hh], a);
          hi_sum[i][hh] = v == 0 ? b : AddInt16(hi_sum[i][hh], b);
        } else {
          const __m256i ab = AddInt16(a, b);
          lo_sum[i][hh] = v == 0 ? ab : AddInt16(lo_sum[i][hh], ab);
        }
      }
    }
  }
#pragma GCC unroll 4
  for (int i = 0; i < R; ++i) {
#pragma GCC unroll 2
    for (int hh = 0; hh < kHalves; ++hh) {
      p[i][hh] = _mm256_madd_epi16(lo_sum[i][hh], ones16);
      if constexpr (P::kFifthBit) {
        p[i][hh] = _mm256_add_epi32(p[i][hh], _mm256_madd_epi16(hi_sum[i][hh], ones16));
      }
    }
  }
}

template <int R, int kHalves>
inline void SetZero(__m256 (&v)[R][kHalves]) {
#pragma GCC unroll 4
  for (int i = 0; i < R; ++i) {
#pragma GCC unroll 2
    for (int hh = 0; hh < kHalves; ++hh) v[i][hh] = _mm256_setzero_ps();
  }
}

// Q4_1's and Q5_1's minimum term of activation rows [i0, i0 + R) against the tile's rows:
// summs[i][hh] = the fma chain of m_w * s_x over the blocks.
template <DType kDType, int R, int kHalves>
inline void MinSums(const MatMulArgs& a, const uint8_t* group, int h0, int64_t i0,
                    __m256 (&summs)[R][kHalves]) {
  using P = Packed<kDType>;
  const int64_t nb = a.n_cols / 32;
  const float* xs = a.x.s + i0 * a.x.scale_stride;
  SetZero(summs);
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* blk = group + b * P::kBlockBytes;
#pragma GCC unroll 2
    for (int hh = 0; hh < kHalves; ++hh) {
      const __m256 m = LoadHalf8(blk + P::kMinOffset + 16 * (h0 + hh));
#pragma GCC unroll 4
      for (int i = 0; i < R; ++i) {
        const __m256 s = _mm256_set1_ps(xs[i * a.x.scale_stride + b]);
        summs[i][hh] = _mm256_fmadd_ps(m, s, summs[i][hh]);
      }
    }
  }
}

// Stores y[i0 + i, rows 8 (h0 + hh) + lane] = y[i][hh] for the rows below `valid` (counted from
// the group's first row).
template <int R, int kHalves>
inline void StoreTile(const MatMulArgs& a, int64_t g, int h0, int64_t i0, int valid,
                      const __m256 (&y)[R][kHalves]) {
  for (int hh = 0; hh < kHalves; ++hh) {
    const int first = kHalfRows * (h0 + hh);
    const int count = std::clamp(valid - first, 0, kHalfRows);
    for (int i = 0; i < R; ++i) {
      float* out = a.y + (i0 + i) * a.n_rows + g * kRows + first;
      if (count == kHalfRows) {
        _mm256_storeu_ps(out, y[i][hh]);
      } else {
        alignas(32) float lanes[kHalfRows];
        _mm256_store_ps(lanes, y[i][hh]);
        std::memcpy(out, lanes, static_cast<size_t>(count) * sizeof(float));
      }
    }
  }
}

// y of activation rows [i0, i0 + R) and rows [8 h0, 8 (h0 + kHalves)) of group g, of which the
// first `valid` (counted from the group's first row) exist. `stream`: this pass is the first
// over the group, so it prefetches.
// kFromPanel (Q5, both halves): the values come from `panel`, the group's blocks unpacked by
// UnpackHalfBlock one after another, half 0 and then half 1 of each.
template <DType kDType, int R, int kHalves, bool kFromPanel = false>
void Tile(const MatMulArgs& a, const int32_t* offsets, int64_t g, int h0, int64_t i0, int valid,
          bool stream, const uint8_t* panel = nullptr) {
  using P = Packed<kDType>;
  const int64_t nb = a.n_cols / 32;
  const int64_t ss = a.x.scale_stride;
  const uint8_t* group = a.w + g * nb * P::kBlockBytes;
  const int8_t* xq = a.x.qs + i0 * a.n_cols;
  const float* xd = a.x.d + i0 * ss;
  const int32_t* offset = P::kOffset != 0 ? offsets + i0 * nb : nullptr;
  __m256 acc[R][kHalves];
  SetZero(acc);
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* blk = group + b * P::kBlockBytes;
    if (stream) PrefetchBlockAhead<kDType>(blk);
    __m256i p[R][kHalves];
    if constexpr (P::kQ8) {
      BlockSumsQ8<R, kHalves>(blk, h0, xq + 32 * b, a.n_cols, p);
    } else {
      const uint8_t* unpacked = kFromPanel ? panel + 2 * b * kUnpackedHalfBytes : nullptr;
      BlockSumsNibbles<kDType, R, kHalves, kFromPanel>(blk, unpacked, h0, xq + 32 * b, a.n_cols,
                                                       p);
    }
#pragma GCC unroll 2
    for (int hh = 0; hh < kHalves; ++hh) {
      const __m256 dw = LoadHalf8(blk + P::kScaleOffset + 16 * (h0 + hh));
#pragma GCC unroll 4
      for (int i = 0; i < R; ++i) {
        __m256i pi = p[i][hh];
        if constexpr (P::kOffset != 0) {
          pi = _mm256_sub_epi32(pi, _mm256_set1_epi32(P::kOffset * offset[i * nb + b]));
        }
        const __m256 scale = _mm256_mul_ps(dw, _mm256_set1_ps(xd[i * ss + b]));
        acc[i][hh] = _mm256_fmadd_ps(scale, _mm256_cvtepi32_ps(pi), acc[i][hh]);
      }
    }
  }
  if constexpr (P::kHasMin) {
    __m256 summs[R][kHalves];
    MinSums<kDType, R, kHalves>(a, group, h0, i0, summs);
#pragma GCC unroll 4
    for (int i = 0; i < R; ++i) {
#pragma GCC unroll 2
      for (int hh = 0; hh < kHalves; ++hh) acc[i][hh] = _mm256_add_ps(acc[i][hh], summs[i][hh]);
    }
  }
  StoreTile<R, kHalves>(a, g, h0, i0, valid, acc);
}

// Activation rows [i, i_end) against halves [h0, h0 + kHalves) of group g, R rows per tile,
// then the rest in one smaller tile.
template <DType kDType, int R, int kHalves, bool kFromPanel = false>
void Tiles(const MatMulArgs& a, const int32_t* offsets, int64_t g, int h0, int valid, int64_t i,
           int64_t i_end, bool stream, const uint8_t* panel = nullptr) {
  for (; i + R <= i_end; i += R, stream = false) {
    Tile<kDType, R, kHalves, kFromPanel>(a, offsets, g, h0, i, valid, stream, panel);
  }
  if constexpr (R > 1) {
    if (i < i_end) {
      Tiles<kDType, R - 1, kHalves, kFromPanel>(a, offsets, g, h0, valid, i, i_end, stream,
                                                panel);
    }
  }
}

// Activation rows per pass over the thread's groups: their quantized values stay in L1 while
// each group comes from L2 (or memory, on the first pass) once per pass.
constexpr int64_t kRowsPerPass = 32;

// Rows of a tile from a panel: 2 against both halves (two int16 sums and an accumulator for
// each of 4 row-halves) did better than 3 or 4 (which spill more) or 4 against one half.
constexpr int kPanelTileRows = 2;

// A Q5 type's pass over group g with more rows than one tile: the group's values are unpacked
// once into a panel that the pass's tiles read (unpacking the fifth bits in every tile cost as
// much as the products of 3 rows).
template <DType kDType>
void PassQ5Panel(const MatMulArgs& a, const int32_t* offsets, int64_t g, int valid, int64_t i0,
                 int64_t i_end, bool stream) {
  using P = Packed<kDType>;
  static_assert(P::kFifthBit);
  const int64_t nb = a.n_cols / 32;
  static thread_local std::vector<uint8_t> panel;
  panel.resize(static_cast<size_t>(nb * 2 * kUnpackedHalfBytes));
  const uint8_t* group = a.w + g * nb * P::kBlockBytes;
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* blk = group + b * P::kBlockBytes;
    if (stream) PrefetchBlockAhead<kDType>(blk);
    UnpackHalfBlock<kDType>(blk, 0, panel.data() + 2 * b * kUnpackedHalfBytes);
    UnpackHalfBlock<kDType>(blk, 1, panel.data() + (2 * b + 1) * kUnpackedHalfBytes);
  }
  Tiles<kDType, kPanelTileRows, 2, true>(a, offsets, g, 0, valid, i0, i_end, false,
                                         panel.data());
}

// A pass's activation rows [i0, i_end) against group g.
template <DType kDType>
void PassGroup(const MatMulArgs& a, const int32_t* offsets, int64_t g, int valid, int64_t i0,
               int64_t i_end, bool stream) {
  if constexpr (!Packed<kDType>::kFifthBit) {
    Tiles<kDType, kTileRows<kDType>, 2>(a, offsets, g, 0, valid, i0, i_end, stream);
  } else if (i_end - i0 > kTileRows<kDType>) {
    PassQ5Panel<kDType>(a, offsets, g, valid, i0, i_end, stream);
  } else {
    for (int h = 0; kHalfRows * h < valid; ++h) {
      Tiles<kDType, kTileRows<kDType>, 1>(a, offsets, g, h, valid, i0, i_end, stream && h == 0);
    }
  }
}

template <DType kDType>
void MatMulPacked(const MatMulArgs& a, int64_t r_begin, int64_t r_end) {
  const int32_t* offsets = Packed<kDType>::kOffset != 0 ? a.x.block_sums : nullptr;
  if (a.n == 1) {  // decode: both halves in one pass
    for (int64_t r0 = r_begin; r0 < r_end; r0 += kRows) {
      const int valid = static_cast<int>(std::min<int64_t>(kRows, r_end - r0));
      Tile<kDType, 1, 2>(a, offsets, r0 / kRows, 0, 0, valid, /*stream=*/true);
    }
    return;
  }
  for (int64_t i0 = 0; i0 < a.n; i0 += kRowsPerPass) {
    const int64_t i_end = std::min(a.n, i0 + kRowsPerPass);
    for (int64_t r0 = r_begin; r0 < r_end; r0 += kRows) {
      const int valid = static_cast<int>(std::min<int64_t>(kRows, r_end - r0));
      PassGroup<kDType>(a, offsets, r0 / kRows, valid, i0, i_end, /*stream=*/i0 == 0);
    }
  }
}

}  // namespace

void FillPackedAvx2Kernels(IsaKernels* k) {
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
