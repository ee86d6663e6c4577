// Q4_0, Q4_1, Q5_0, Q5_1 and Q8_0 MatMul kernels of the avx512-vnni and amx levels (see
// isa_kernels.h): GGML's ggml_vec_dot_q4_0_q8_0 / q4_1_q8_1 / q5_0_q8_0 / q5_1_q8_1 / q8_0_q8_0
// arithmetic, with a 512-bit register holding the 8 f32 lane accumulators of two weight rows
// r, r + 1 for one activation row, interleaved: register lane 2j is lane j of row r, lane 2j + 1
// lane j of row r + 1. Per block of 32 values:
//
//   P   = vpdpbusd of the two rows' values, dword-interleaved the same way, with the activation
//         block's dwords each repeated twice (16 int32 lane sums of 4 products each, exact)
//   acc = fma([d_w(r) * d_x, d_w(r+1) * d_x] x 8, f32(P), acc)
//
// then per row GGML's hsum_float_8 of its 8 lanes, plus for Q4_1 summs, the chain
// fma(m_w, s_x, summs) over the blocks (vectorized over rows, one row per lane). The scale pair
// comes from memory by a 64-bit broadcast, a load rather than a shuffle.
//
// Signed weights (Q8_0, Q4_0 as q - 8, Q5_0 as q - 16): vpdpbusd multiplies u8 by s8, so the
// panel kernel feeds the activations as x + 128 (u8) and starts the accumulator from the bits of 1.5 * 2^23
// minus 128 * (lane sum of w), precomputed per block: read as f32 the result is 1.5 * 2^23 + P,
// and one subtraction gives P. The direct kernel starts from -offset * (lane sum of x) and adds
// the unsigned values' products for Q4_0 and Q5_0, and multiplies |w| by x with w's sign for
// Q8_0, as GGML does. All give the same exact lane sums.
//
// Two kernels give the same bits for every output:
//   - Panel (n >= kPanelMinRows): 16 weight rows are unpacked once per call into a per-thread
//     panel (values one per byte, interleaved pair by pair; scales and minima as f32; the signed
//     lane corrections); then for each tile of kTileRows activation rows, their blocks (dwords
//     repeated) and scales d_w * d_x are prepared once, and the 8 pairs run over them 4 at a
//     time (16 accumulators).
//   - Direct (decode): one activation row against 16 weight rows read straight from W.
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/cpu/isa_kernels.h"

// Everything below may use AVX-512 F/BW/VL/DQ/VNNI besides AVX2, FMA, F16C and BMI2. All headers
// are included above, so no inline function with external linkage is compiled for this target.
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c,bmi2,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni"))), apply_to = function)
#else
#pragma GCC target("avx2,fma,f16c,bmi2,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni")
#endif
// GCC 12's AVX-512 headers start some conversions from _mm*_undefined_*() values, which
// -Wmaybe-uninitialized / -Wuninitialized report at every use (a known false positive).
#if !defined(__clang__)  // a GCC-only warning
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#pragma GCC diagnostic ignored "-Wuninitialized"

namespace baton::kernels {
namespace {

constexpr int kRows = 16;          // weight rows per panel / direct tile: 8 pairs
constexpr int kPairs = kRows / 2;
constexpr int kTilePairs = 4;      // pairs per panel tile
constexpr int kTileRows = 4;       // activation rows per panel tile
constexpr int kPanelMinRows = 4;   // activation rows from which the panel kernel is used
// The bits of 1.5 * 2^23: an int32 accumulator started there holds, read as f32, 1.5 * 2^23 + P
// for |P| < 2^22, from which one subtraction gives f32(P) exactly (cheaper here than a zeroed
// accumulator and vcvtdq2ps).
constexpr int32_t kMagicBits = 0x4b400000;

inline __m256i Load256(const void* p) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
}

// The dword interleave of two rows' 32 values: [a0 b0 a1 b1 ... a7 b7] in dwords.
inline __m512i Interleave(__m256i a, __m256i b) {
  const __m512i order = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
  return _mm512_permutex2var_epi32(_mm512_castsi256_si512(a), order, _mm512_castsi256_si512(b));
}

// [p[0], p[1]] x 8, broadcast straight from memory: a load, not a shuffle (the compiler would
// otherwise keep the pair in a register and broadcast it on the shuffle port).
inline __m512 LoadPair(const float* p) {
  __m512 r;
  __asm__("vbroadcastsd %1, %0" : "=v"(r) : "m"(*reinterpret_cast<const double*>(p)));
  return r;
}

// An activation block with each dword repeated: the operand that pairs with Interleave's rows.
inline __m512i RepeatDwords(const int8_t* x) {
  const __m512i order = _mm512_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7);
  return _mm512_permutexvar_epi32(order, _mm512_castsi256_si512(Load256(x)));
}

// Two rows' blocks of packed nibbles (16 bytes each; low nibbles are values 0..15, high nibbles
// 16..31), unpacked and interleaved by dwords.
inline __m512i InterleaveNibbles(const uint8_t* a, const uint8_t* b) {
  const __m256i ab = _mm256_inserti128_si256(
      _mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(a))),
      _mm_loadu_si128(reinterpret_cast<const __m128i*>(b)), 1);
  const __m512i lo_hi = _mm512_inserti64x4(_mm512_castsi256_si512(ab), _mm256_srli_epi16(ab, 4), 1);
  // Dwords of lo_hi: a values 0..15 (0-3), b 0..15 (4-7), a 16..31 (8-11), b 16..31 (12-15).
  const __m512i order = _mm512_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7, 8, 12, 9, 13, 10, 14, 11, 15);
  return _mm512_and_si512(_mm512_permutexvar_epi32(order, lo_hi), _mm512_set1_epi8(0x0f));
}

// Weight formats: the 32 values of a block (u8, or s8 when kSigned; Values2 for two rows,
// interleaved), its f16 scale (and minimum) word. Formats whose signed values are stored with an
// offset (value = u - kOffset, u unsigned) also give the unsigned ones (Unsigned2).
struct FormatQ4_0 {
  static constexpr int kBytes = 18;
  static constexpr bool kHasMin = false;
  static constexpr bool kSigned = true;
  static constexpr int kOffset = 8;
  static __m512i Unsigned2(const uint8_t* a, const uint8_t* b) {
    return InterleaveNibbles(a + 2, b + 2);
  }
  static __m512i Values2(const uint8_t* a, const uint8_t* b) {
    return _mm512_sub_epi8(Unsigned2(a, b), _mm512_set1_epi8(kOffset));
  }
};

struct FormatQ4_1 {
  static constexpr int kBytes = 20;
  static constexpr bool kHasMin = true;
  static constexpr bool kSigned = false;
  static constexpr int kOffset = 0;
  static __m512i Values2(const uint8_t* a, const uint8_t* b) {
    return InterleaveNibbles(a + 4, b + 4);
  }
};

// Two rows' Q5 blocks (qh: the u32 of fifth bits, followed by the 16 nibble bytes): the
// nibbles as InterleaveNibbles, plus 16 where bit v of a row's qh is set. The interleave puts
// row a's value 4l + t at byte 8l + t and row b's at byte 8l + 4 + t, so the byte mask is the two
// qh words deposited into alternating nibbles.
inline __m512i InterleaveQ5(const uint8_t* qh_a, const uint8_t* qh_b) {
  uint32_t bits_a, bits_b;
  std::memcpy(&bits_a, qh_a, sizeof bits_a);
  std::memcpy(&bits_b, qh_b, sizeof bits_b);
  const __mmask64 fifth = _pdep_u64(bits_a, 0x0f0f0f0f0f0f0f0full) |
                          _pdep_u64(bits_b, 0xf0f0f0f0f0f0f0f0ull);
  const __m512i nibbles = InterleaveNibbles(qh_a + 4, qh_b + 4);
  return _mm512_mask_add_epi8(nibbles, fifth, nibbles, _mm512_set1_epi8(16));
}

struct FormatQ5_0 {
  static constexpr int kBytes = 22;  // f16 d, u32 qh, 16 nibble bytes
  static constexpr bool kHasMin = false;
  static constexpr bool kSigned = true;
  static constexpr int kOffset = 16;
  static __m512i Unsigned2(const uint8_t* a, const uint8_t* b) {
    return InterleaveQ5(a + 2, b + 2);
  }
  static __m512i Values2(const uint8_t* a, const uint8_t* b) {
    return _mm512_sub_epi8(Unsigned2(a, b), _mm512_set1_epi8(kOffset));
  }
};

struct FormatQ5_1 {
  static constexpr int kBytes = 24;  // f16 d, f16 m, u32 qh, 16 nibble bytes
  static constexpr bool kHasMin = true;
  static constexpr bool kSigned = false;
  static constexpr int kOffset = 0;
  static __m512i Values2(const uint8_t* a, const uint8_t* b) { return InterleaveQ5(a + 4, b + 4); }
};

struct FormatQ8_0 {
  static constexpr int kBytes = 34;
  static constexpr bool kHasMin = false;
  static constexpr bool kSigned = true;
  static constexpr int kOffset = 0;  // int8 values
  static __m512i Values2(const uint8_t* a, const uint8_t* b) {
    return Interleave(Load256(a + 2), Load256(b + 2));
  }
};

// The f16 scale (low half) and minimum (high half, Q4_1) words of block b of 16 rows `offsets`
// bytes from `first`, as f32.
template <class F>
inline void Scales16(const uint8_t* first, __m512i offsets, __m512* d, __m512* m) {
  const __m512i words = _mm512_i32gather_epi32(offsets, first, 1);
  *d = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(words));
  if constexpr (F::kHasMin) *m = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(words, 16)));
}

// Scales16 for the blocks at row[j] + offset, read with 16 loads: a 16-lane gather costs more on
// some CPUs (AMD's Zen 4 among them).
template <class F>
inline void Scales16Loads(const uint8_t* const (&row)[16], int64_t offset, __m512* d, __m512* m) {
  alignas(64) uint32_t words[16];
#pragma GCC unroll 16
  for (int j = 0; j < 16; ++j) std::memcpy(&words[j], row[j] + offset, sizeof(uint32_t));
  const __m512i w = _mm512_load_si512(words);
  *d = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(w));
  if constexpr (F::kHasMin) {
    *m = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(w, 16)));
  }
}

// Byte offsets of 16 weight rows from the first; rows past the valid ones repeat the last valid
// row (their results are never stored).
inline __m512i RowOffsets(int64_t row_bytes, int valid) {
  alignas(64) int32_t offsets[16];
  for (int j = 0; j < 16; ++j) offsets[j] = static_cast<int32_t>(std::min(j, valid - 1) * row_bytes);
  return _mm512_load_si512(offsets);
}

// GGML's hsum_float_8 of the 8 rows held by 4 pair accumulators z[0..4) (rows 2k, 2k + 1 in
// z[k]), as [row 0, ..., row 7]: in each row's own lane numbering, lanes j + 4 added to j, then
// j + 2 to j, then 1 to 0, several rows per shuffle.
inline __m256 RowSums8(const __m512* z) {
  // [z0 lanes 0..7 + 8..15 | z1 the same]: per row a_j + a_(j+4), j < 4, still interleaved.
  const __m512 u01 = _mm512_add_ps(_mm512_shuffle_f32x4(z[0], z[1], _MM_SHUFFLE(1, 0, 1, 0)),
                                   _mm512_shuffle_f32x4(z[0], z[1], _MM_SHUFFLE(3, 2, 3, 2)));
  const __m512 u23 = _mm512_add_ps(_mm512_shuffle_f32x4(z[2], z[3], _MM_SHUFFLE(1, 0, 1, 0)),
                                   _mm512_shuffle_f32x4(z[2], z[3], _MM_SHUFFLE(3, 2, 3, 2)));
  // Quarters: rows (0, 1), (2, 3), (4, 5), (6, 7), each [A0 + A2, B0 + B2, A1 + A3, B1 + B3].
  const __m512 v = _mm512_add_ps(_mm512_shuffle_f32x4(u01, u23, _MM_SHUFFLE(2, 0, 2, 0)),
                                 _mm512_shuffle_f32x4(u01, u23, _MM_SHUFFLE(3, 1, 3, 1)));
  const __m512 w = _mm512_add_ps(v, _mm512_permute_ps(v, _MM_SHUFFLE(1, 0, 3, 2)));
  const __m512i order = _mm512_setr_epi32(0, 1, 4, 5, 8, 9, 12, 13, 0, 1, 4, 5, 8, 9, 12, 13);
  return _mm512_castps512_ps256(_mm512_permutexvar_ps(order, w));
}

// ---- direct kernel: 1 activation row x 16 weight rows ------------------------------------------

template <class F>
void DirectTile(const MatMulArgs& a, int64_t i, int64_t r0, int valid) {
  const int64_t nb = a.n_cols / 32;
  const int64_t ss = a.x.scale_stride;
  const uint8_t* first = a.w + r0 * a.row_bytes;
  const uint8_t* row[kRows];
  for (int j = 0; j < kRows; ++j) row[j] = first + std::min(j, valid - 1) * a.row_bytes;
  const int8_t* xq = a.x.qs + i * a.n_cols;
  const float* xd = a.x.d + i * ss;
  const float* xs = a.x.s + i * ss;
  __m512 acc[kPairs];
#pragma GCC unroll 8
  for (int k = 0; k < kPairs; ++k) acc[k] = _mm512_setzero_ps();
  __m512 summs = _mm512_setzero_ps();
  alignas(64) float scale[kRows];
  for (int64_t b = 0; b < nb; ++b) {
    __m512 d, m;
    Scales16Loads<F>(row, b * F::kBytes, &d, &m);
    _mm512_store_ps(scale, _mm512_mul_ps(d, _mm512_set1_ps(xd[b])));
    if constexpr (F::kHasMin) summs = _mm512_fmadd_ps(m, _mm512_set1_ps(xs[b]), summs);
    const __m512i x = RepeatDwords(xq + 32 * b);
    // Offset formats: P = sum u * x - kOffset * (lane sum of x), so each lane starts from the
    // second term and one vpdpbusd of the unsigned values adds the first (exact either way).
    __m512i start = _mm512_setzero_si512();
    if constexpr (F::kOffset > 0) {
      const __m512i x_sums = _mm512_dpbusd_epi32(start, _mm512_set1_epi8(1), x);
      start = _mm512_mullo_epi32(x_sums, _mm512_set1_epi32(-F::kOffset));
    }
#pragma GCC unroll 8
    for (int k = 0; k < kPairs; ++k) {
      const uint8_t* a_block = row[2 * k] + b * F::kBytes;
      const uint8_t* b_block = row[2 * k + 1] + b * F::kBytes;
      __m512i p;
      if constexpr (F::kOffset > 0) {
        p = _mm512_dpbusd_epi32(start, F::Unsigned2(a_block, b_block), x);
      } else if constexpr (F::kSigned) {
        const __m512i w = F::Values2(a_block, b_block);
        const __mmask64 negative = _mm512_movepi8_mask(w);
        const __m512i x_signed = _mm512_mask_sub_epi8(x, negative, _mm512_setzero_si512(), x);
        p = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_abs_epi8(w), x_signed);
      } else {
        p = _mm512_dpbusd_epi32(_mm512_setzero_si512(), F::Values2(a_block, b_block), x);
      }
      acc[k] = _mm512_fmadd_ps(LoadPair(scale + 2 * k), _mm512_cvtepi32_ps(p), acc[k]);
    }
  }
  __m512 result = _mm512_insertf32x8(_mm512_castps256_ps512(RowSums8(acc)), RowSums8(acc + 4), 1);
  if constexpr (F::kHasMin) result = _mm512_add_ps(result, summs);
  _mm512_mask_storeu_ps(a.y + i * a.n_rows + r0, static_cast<__mmask16>((1u << valid) - 1), result);
}

// ---- panel kernel: kTileRows activation rows x kTilePairs row pairs ----------------------------

// Weight rows of one panel, unpacked; reused across calls of a thread.
struct Panel {
  std::vector<uint8_t> q;      // [blocks][kPairs][64] values of rows 2k, 2k + 1, interleaved
  std::vector<float> scale;    // [blocks][kRows] d
  std::vector<float> min;      // [blocks][kRows] m (Q4_1)
  std::vector<int32_t> corr;   // [blocks][kPairs][16] -128 * lane sums of w (signed formats)
};

Panel& ThreadPanel() {
  static thread_local Panel panel;
  return panel;
}

template <class F>
void PackPanel(const MatMulArgs& a, int64_t r0, int valid, Panel& p) {
  const int64_t nb = a.n_cols / 32;
  p.q.resize(static_cast<size_t>(nb * kPairs * 64));
  p.scale.resize(static_cast<size_t>(nb * kRows));
  if constexpr (F::kHasMin) p.min.resize(static_cast<size_t>(nb * kRows));
  if constexpr (F::kSigned) p.corr.resize(static_cast<size_t>(nb * kPairs * 16));
  const uint8_t* first = a.w + r0 * a.row_bytes;
  const __m512i offsets = RowOffsets(a.row_bytes, valid);
  const uint8_t* row[kRows];
  for (int j = 0; j < kRows; ++j) row[j] = first + std::min(j, valid - 1) * a.row_bytes;
  for (int64_t b = 0; b < nb; ++b) {
    for (int k = 0; k < kPairs; ++k) {
      const __m512i w = F::Values2(row[2 * k] + b * F::kBytes, row[2 * k + 1] + b * F::kBytes);
      const int64_t at = b * kPairs + k;
      _mm512_storeu_si512(p.q.data() + 64 * at, w);
      if constexpr (F::kSigned) {
        const __m512i sums = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_set1_epi8(1), w);
        _mm512_storeu_si512(p.corr.data() + 16 * at,
                            _mm512_sub_epi32(_mm512_set1_epi32(kMagicBits), _mm512_slli_epi32(sums, 7)));
      }
    }
    __m512 d, m;
    Scales16<F>(first + b * F::kBytes, offsets, &d, &m);
    _mm512_storeu_ps(p.scale.data() + b * kRows, d);
    if constexpr (F::kHasMin) _mm512_storeu_ps(p.min.data() + b * kRows, m);
  }
}

// The activation side of a tile of NA rows, prepared once for all pairs of the panel: each
// block with its dwords repeated (and + 128 for signed weights), the scales d_w * d_x of the
// panel's 16 rows, and Q4_1's summs.
struct TileRows {
  std::vector<int8_t> x;       // [NA][blocks][64]
  std::vector<float> scale;    // [NA][blocks][kRows]
};

TileRows& ThreadTileRows() {
  static thread_local TileRows rows;
  return rows;
}

// Activation rows [i0, i0 + NA) against the panel: the results of row i (valid of the panel's 16
// rows) go to y + i * n_rows.
template <class F, int NA>
void PanelTile(const MatMulArgs& a, const Panel& p, int64_t i0, float* y, int valid) {
  const int64_t nb = a.n_cols / 32;
  const int64_t ss = a.x.scale_stride;
  TileRows& t = ThreadTileRows();
  t.x.resize(static_cast<size_t>(NA * nb * 64));
  t.scale.resize(static_cast<size_t>(NA * nb * kRows));
  // Plain pointers: stores through int8_t / float pointers could otherwise alias the vectors'
  // own pointers, which the compiler would then reload in every iteration.
  int8_t* const tx = t.x.data();
  float* const tscale = t.scale.data();
  const uint8_t* const pq = p.q.data();
  const float* const pscale = p.scale.data();
  const float* const pmin = F::kHasMin ? p.min.data() : nullptr;
  const int32_t* const pcorr = F::kSigned ? p.corr.data() : nullptr;
  const int8_t* const xq = a.x.qs + i0 * a.n_cols;
  const float* const xd = a.x.d + i0 * ss;
  const float* const xs = a.x.s + i0 * ss;
  __m512 summs[NA];
#pragma GCC unroll 8
  for (int i = 0; i < NA; ++i) summs[i] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {  // blocks outside: the rows' summs chains interleave
    const __m512 d = _mm512_loadu_ps(pscale + b * kRows);
#pragma GCC unroll 8
    for (int i = 0; i < NA; ++i) {
      __m512i x = RepeatDwords(xq + i * a.n_cols + 32 * b);
      if constexpr (F::kSigned) x = _mm512_xor_si512(x, _mm512_set1_epi8(static_cast<char>(0x80)));
      _mm512_storeu_si512(tx + (i * nb + b) * 64, x);
      _mm512_storeu_ps(tscale + (i * nb + b) * kRows, _mm512_mul_ps(d, _mm512_set1_ps(xd[i * ss + b])));
      if constexpr (F::kHasMin) {
        // summs = fma(m_w, s_x, summs) block by block, one row per lane.
        summs[i] = _mm512_fmadd_ps(_mm512_loadu_ps(pmin + b * kRows), _mm512_set1_ps(xs[i * ss + b]),
                                   summs[i]);
      }
    }
  }
  const __m512i magic = _mm512_set1_epi32(kMagicBits);
  const __m512 magic_f = _mm512_castsi512_ps(magic);
  for (int k0 = 0; k0 < kPairs && 2 * k0 < valid; k0 += kTilePairs) {
    __m512 acc[NA][kTilePairs];
#pragma GCC unroll 8
    for (int i = 0; i < NA; ++i) {
#pragma GCC unroll 8
      for (int k = 0; k < kTilePairs; ++k) acc[i][k] = _mm512_setzero_ps();
    }
    for (int64_t b = 0; b < nb; ++b) {
      const int64_t at = b * kPairs + k0;
      __m512i w[kTilePairs];
#pragma GCC unroll 8
      for (int k = 0; k < kTilePairs; ++k) w[k] = _mm512_loadu_si512(pq + 64 * (at + k));
#pragma GCC unroll 8
      for (int i = 0; i < NA; ++i) {
        const __m512i x = _mm512_loadu_si512(tx + (i * nb + b) * 64);
        const float* scale = tscale + (i * nb + b) * kRows + 2 * k0;
#pragma GCC unroll 8
        for (int k = 0; k < kTilePairs; ++k) {
          __m512i lanes;
          if constexpr (F::kSigned) {
            lanes = _mm512_dpbusd_epi32(_mm512_loadu_si512(pcorr + 16 * (at + k)), x, w[k]);
          } else {
            lanes = _mm512_dpbusd_epi32(magic, w[k], x);
          }
          const __m512 sums = _mm512_sub_ps(_mm512_castsi512_ps(lanes), magic_f);
          acc[i][k] = _mm512_fmadd_ps(LoadPair(scale + 2 * k), sums, acc[i][k]);
        }
      }
    }
    const int rows = std::min(valid - 2 * k0, 2 * kTilePairs);
    const __mmask8 mask = static_cast<__mmask8>((1u << rows) - 1);
#pragma GCC unroll 8
    for (int i = 0; i < NA; ++i) {
      __m256 r = RowSums8(acc[i]);
      if constexpr (F::kHasMin) {
        r = _mm256_add_ps(r, k0 == 0 ? _mm512_castps512_ps256(summs[i])
                                     : _mm512_extractf32x8_ps(summs[i], 1));
      }
      _mm256_mask_storeu_ps(y + i * a.n_rows + 2 * k0, mask, r);
    }
  }
}

template <class F>
void MatMulRowsBlock32(const MatMulArgs& a, int64_t r_begin, int64_t r_end) {
  if (a.n < kPanelMinRows) {
    for (int64_t r0 = r_begin; r0 < r_end; r0 += kRows) {
      const int valid = static_cast<int>(std::min<int64_t>(kRows, r_end - r0));
      for (int64_t i = 0; i < a.n; ++i) DirectTile<F>(a, i, r0, valid);
    }
    return;
  }
  Panel& p = ThreadPanel();
  for (int64_t r0 = r_begin; r0 < r_end; r0 += kRows) {
    const int valid = static_cast<int>(std::min<int64_t>(kRows, r_end - r0));
    PackPanel<F>(a, r0, valid, p);
    float* y = a.y + r0;
    int64_t i = 0;
    for (; i + kTileRows <= a.n; i += kTileRows) PanelTile<F, kTileRows>(a, p, i, y + i * a.n_rows, valid);
    for (; i < a.n; ++i) PanelTile<F, 1>(a, p, i, y + i * a.n_rows, valid);
  }
}

}  // namespace

void FillBlock32Avx512Kernels(IsaKernels* k) {
  k->block32_arithmetic = Block32Arithmetic::kGgmlLanes;
  k->matmul_q4_0 = MatMulRowsBlock32<FormatQ4_0>;
  k->matmul_q4_1 = MatMulRowsBlock32<FormatQ4_1>;
  k->matmul_q8_0 = MatMulRowsBlock32<FormatQ8_0>;
  k->matmul_q5_0 = MatMulRowsBlock32<FormatQ5_0>;
  k->matmul_q5_1 = MatMulRowsBlock32<FormatQ5_1>;
}

}  // namespace baton::kernels

#if defined(__clang__)
#pragma clang attribute pop
#endif
