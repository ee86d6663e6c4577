// The AMX level of the CPU kernels (see isa_kernels.h): the AVX-512 VNNI table, and when
// kGgmlExactMatMul is false, MatMul kernels for Q4_0, Q4_1 and Q8_0 weights on AMX tiles, which
// compute another arithmetic than GGML's (AMX's int32 results sum whole blocks, GGML keeps 8 f32
// lanes per block): about 2x faster on prefill-sized batches, results not bit-identical to
// llama.cpp's. Their one canonical arithmetic per output y[i, r]:
//
//   for each block b of 32 (in order):
//     S = sum_k qw[r, k] * qx[i, k] over the block            exact int32
//     acc = fma(f32(S), d_w[r, b] * d_x[i, b], acc)            f32, starting from 0
//     acc_min = fma(m_w[r, b], s_x[i, b], acc_min)             f32, starting from 0 (Q4_0: m = -8 d)
//   y[i, r] = acc + acc_min
//
// Two kernels compute it:
//   - AMX tiles (n >= kAmxMinRows): TDPBSUD / TDPBSSD multiply 16 activation rows by 16 weight rows
//     over one block into a 16x16 int32 tile; AVX-512 applies the scales, one zmm per activation
//     row whose 16 lanes are the 16 outputs. Weights are packed per 16 rows into the tiles'
//     4-byte-interleaved layout once per call, for all activation rows.
//   - AVX-512 VNNI (small n, decode): 16 weight rows x 1 activation row; vpdpbusd gives 8 partial
//     sums per row, reduced exactly to one int32 per row (lane), then the same f32 steps.
// Because S is exact and the f32 steps are the same per output, both give the same bits: a row's
// result does not depend on n (batch invariance). Only called after run-time detection, which also
// obtained the OS permission for the tile state (cpu_isa.h).
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/cpu/isa_kernels.h"

// Everything below may use AVX-512 F/BW/VL/DQ/VNNI and AMX-TILE/INT8 besides AVX2, FMA and F16C.
// All headers are included above, so no inline function with external linkage is compiled for
// this target.
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,amx-tile,amx-int8"))), apply_to = function)
#else
#pragma GCC target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,amx-tile,amx-int8")
#endif
// GCC 12's AVX-512 headers start some conversions from _mm*_undefined_*() values, which
// -Wmaybe-uninitialized reports at every use (a known false positive).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace baton::kernels {
namespace {

constexpr int kRows = 16;        // weight rows per tile: the 16 f32 lanes of a zmm
constexpr int kAmxMinRows = 4;   // activation rows from which the AMX kernel is used

inline __m256i Load256(const void* p) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
}

// 16 bytes of packed nibbles -> 32 bytes: low nibbles first (elements 0..15), then high nibbles.
inline __m256i LoadNibbles32(const uint8_t* p) {
  const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(q, 4), q), _mm256_set1_epi8(0x0f));
}

// Two rows' blocks of packed nibbles (16 bytes each) -> [a low nibbles, a high, b low, b high].
inline __m512i LoadNibbles2x32(const uint8_t* a, const uint8_t* b) {
  const __m256i ab = _mm256_inserti128_si256(
      _mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(a))),
      _mm_loadu_si128(reinterpret_cast<const __m128i*>(b)), 1);
  const __m512i lanes = _mm512_setr_epi64(0, 1, 8, 9, 2, 3, 10, 11);
  const __m512i v = _mm512_permutex2var_epi64(_mm512_castsi256_si512(ab), lanes,
                                              _mm512_castsi256_si512(_mm256_srli_epi16(ab, 4)));
  return _mm512_and_si512(v, _mm512_set1_epi8(0x0f));
}

// The f16 pairs at the start of block b of 16 rows (byte offsets `rows` from `first`) as f32.
inline __m512i GatherWords16(const uint8_t* first, __m512i rows) {
  return _mm512_i32gather_epi32(rows, first, 1);
}
inline __m512 LowHalvesF16(__m512i words) {
  return _mm512_cvtph_ps(_mm512_cvtepi32_epi16(words));
}
inline __m512 HighHalvesF16(__m512i words) {
  return _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(words, 16)));
}

struct FormatQ4_0 {
  static constexpr int kBytes = 18;
  static constexpr bool kHasMin = true;
  static constexpr bool kSigned = false;
  static __m256i Quants(const uint8_t* block) { return LoadNibbles32(block + 2); }
  static __m512i Quants2(const uint8_t* a, const uint8_t* b) {
    return LoadNibbles2x32(a + 2, b + 2);
  }
  static void Scales16(const uint8_t* first, __m512i rows, __m512* d, __m512* m) {
    *d = LowHalvesF16(GatherWords16(first, rows));
    *m = _mm512_mul_ps(*d, _mm512_set1_ps(-8.0f));
  }
};

struct FormatQ4_1 {
  static constexpr int kBytes = 20;
  static constexpr bool kHasMin = true;
  static constexpr bool kSigned = false;
  static __m256i Quants(const uint8_t* block) { return LoadNibbles32(block + 4); }
  static __m512i Quants2(const uint8_t* a, const uint8_t* b) {
    return LoadNibbles2x32(a + 4, b + 4);
  }
  static void Scales16(const uint8_t* first, __m512i rows, __m512* d, __m512* m) {
    const __m512i words = GatherWords16(first, rows);
    *d = LowHalvesF16(words);
    *m = HighHalvesF16(words);
  }
};

struct FormatQ8_0 {
  static constexpr int kBytes = 34;
  static constexpr bool kHasMin = false;
  static constexpr bool kSigned = true;
  static __m256i Quants(const uint8_t* block) { return Load256(block + 2); }
  static __m512i Quants2(const uint8_t* a, const uint8_t* b) {
    return _mm512_inserti64x4(_mm512_castsi256_si512(Load256(a + 2)), Load256(b + 2), 1);
  }
  static void Scales16(const uint8_t* first, __m512i rows, __m512* d, __m512* m) {
    *d = LowHalvesF16(GatherWords16(first, rows));
    *m = _mm512_setzero_ps();
  }
};

// Byte offsets of the 16 weight rows of a tile from its first row; rows past the valid ones
// repeat the last valid row (their results are never stored).
inline __m512i RowOffsets(int64_t row_bytes, int valid) {
  alignas(64) int32_t offsets[kRows];
  for (int j = 0; j < kRows; ++j) offsets[j] = static_cast<int32_t>(std::min(j, valid - 1) * row_bytes);
  return _mm512_load_si512(offsets);
}

// ---- the VNNI kernel: 16 weight rows x 1 activation row ---------------------------------------

// Sums of the 8 int32 partials of each of 16 rows: in[k] holds rows slot 2k (lanes 0..7) and
// 2k+1 (lanes 8..15); the result's lane 4q + t holds slot q + 4t. Exact (integer adds).
inline __m512i ReducePartials(const __m512i in[8]) {
  __m512i q[4];
  for (int k = 0; k < 4; ++k) {  // quarter c of q[k]: the 4 partials of slot 4k + c
    const __m512i t = _mm512_shuffle_i32x4(in[2 * k], in[2 * k + 1], _MM_SHUFFLE(2, 0, 2, 0));
    const __m512i u = _mm512_shuffle_i32x4(in[2 * k], in[2 * k + 1], _MM_SHUFFLE(3, 1, 3, 1));
    q[k] = _mm512_add_epi32(t, u);
  }
  // Quarter c: 2 partials of slots c, c + 4 (r0) and of c + 8, c + 12 (r1).
  const __m512i r0 = _mm512_add_epi32(_mm512_unpacklo_epi64(q[0], q[1]), _mm512_unpackhi_epi64(q[0], q[1]));
  const __m512i r1 = _mm512_add_epi32(_mm512_unpacklo_epi64(q[2], q[3]), _mm512_unpackhi_epi64(q[2], q[3]));
  const __m512 f0 = _mm512_castsi512_ps(r0), f1 = _mm512_castsi512_ps(r1);
  const __m512i even = _mm512_castps_si512(_mm512_shuffle_ps(f0, f1, _MM_SHUFFLE(2, 0, 2, 0)));
  const __m512i odd = _mm512_castps_si512(_mm512_shuffle_ps(f0, f1, _MM_SHUFFLE(3, 1, 3, 1)));
  return _mm512_add_epi32(even, odd);
}

// The weight row in slot s, so that ReducePartials' lane 4q + t (slot q + 4t) is row 4q + t.
constexpr int SlotRow(int s) { return 4 * (s % 4) + s / 4; }

template <class F>
void DecodeTile(const MatMulArgs& a, int64_t i, int64_t r0, int valid) {
  const int64_t nb = a.n_cols / 32;
  const int64_t ss = a.x.scale_stride;
  const uint8_t* first = a.w + r0 * a.row_bytes;
  const uint8_t* slot_row[kRows];
  for (int s = 0; s < kRows; ++s) slot_row[s] = first + std::min(SlotRow(s), valid - 1) * a.row_bytes;
  const __m512i rows = RowOffsets(a.row_bytes, valid);
  const int8_t* xq = a.x.qs + i * a.n_cols;
  const float* xd = a.x.d + i * ss;
  const float* xs = a.x.s + i * ss;
  __m512 acc = _mm512_setzero_ps(), acc_min = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const __m512i x = _mm512_broadcast_i64x4(Load256(xq + 32 * b));
    __m512i partials[8];
#pragma GCC unroll 8
    for (int k = 0; k < 8; ++k) {
      const __m512i w =
          F::Quants2(slot_row[2 * k] + b * F::kBytes, slot_row[2 * k + 1] + b * F::kBytes);
      if constexpr (F::kSigned) {
        const __mmask64 negative = _mm512_movepi8_mask(w);
        const __m512i x_signed = _mm512_mask_sub_epi8(x, negative, _mm512_setzero_si512(), x);
        partials[k] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_abs_epi8(w), x_signed);
      } else {
        partials[k] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), w, x);
      }
    }
    const __m512i sums = ReducePartials(partials);
    __m512 d, m;
    F::Scales16(first + b * F::kBytes, rows, &d, &m);
    acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sums), _mm512_mul_ps(d, _mm512_set1_ps(xd[b])), acc);
    if constexpr (F::kHasMin) acc_min = _mm512_fmadd_ps(m, _mm512_set1_ps(xs[b]), acc_min);
  }
  const __m512 y = F::kHasMin ? _mm512_add_ps(acc, acc_min) : acc;
  _mm512_mask_storeu_ps(a.y + i * a.n_rows + r0, static_cast<__mmask16>((1u << valid) - 1), y);
}

// ---- the AMX kernel: 16 activation rows x 16 weight rows per tile -----------------------------

struct alignas(64) TileConfig {
  uint8_t palette_id;
  uint8_t start_row;
  uint8_t reserved[14];
  uint16_t colsb[16];
  uint8_t rows[16];
};

// Tile registers (the AMX intrinsics need them as literals), two sets so that two blocks are in
// flight:
//   tmm0, tmm3  C  16 x 16 int32
//   tmm1, tmm4  A  16 activation rows x 32 bytes (one block)
//   tmm2, tmm5  B  8 x 64 bytes: 16 weight rows x 32 bytes, 4-byte interleaved

// Weight rows of one tile, packed for the AMX kernel; reused across calls of a thread.
struct AmxPanel {
  std::vector<uint8_t> b;  // [blocks][8][64] B tiles
  std::vector<float> d;    // [blocks][16] scales
  std::vector<float> m;    // [blocks][16] minima
};

AmxPanel& ThreadPanel() {
  static thread_local AmxPanel panel;
  return panel;
}

template <class F>
void PackPanel(const MatMulArgs& a, int64_t r0, int valid, AmxPanel& p) {
  const int64_t nb = a.n_cols / 32;
  p.b.resize(static_cast<size_t>(nb * 512));
  p.d.resize(static_cast<size_t>(nb * kRows));
  p.m.resize(static_cast<size_t>(nb * kRows));
  const uint8_t* first = a.w + r0 * a.row_bytes;
  const __m512i rows = RowOffsets(a.row_bytes, valid);
  // Dword r of weight row j (values 4r..4r+3) goes to B row r, column j.
  const __m512i transpose = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                               _mm512_set1_epi32(32));
  alignas(64) uint8_t values[kRows][32];
  for (int64_t b = 0; b < nb; ++b) {
    for (int j = 0; j < kRows; ++j) {
      const uint8_t* block = first + std::min(j, valid - 1) * a.row_bytes + b * F::kBytes;
      _mm256_store_si256(reinterpret_cast<__m256i*>(values[j]), F::Quants(block));
    }
    uint8_t* tile = p.b.data() + b * 512;
    for (int r = 0; r < 8; ++r) {
      _mm512_storeu_si512(tile + 64 * r, _mm512_i32gather_epi32(transpose, &values[0][4 * r], 1));
    }
    __m512 d, m;
    F::Scales16(first + b * F::kBytes, rows, &d, &m);
    _mm512_storeu_ps(p.d.data() + b * kRows, d);
    _mm512_storeu_ps(p.m.data() + b * kRows, m);
  }
}

// acc[i] = fma(f32(c[i]), d * d_x[i], acc[i]) for the 16 rows of one block's int32 tile c.
inline void ApplyScales(const int32_t (&c)[kRows][kRows], __m512 d, const float* xd, int64_t ss,
                        __m512 (&acc)[kRows]) {
#pragma GCC unroll 16
  for (int i = 0; i < kRows; ++i) {
    acc[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_load_si512(c[i])),
                             _mm512_mul_ps(d, _mm512_set1_ps(xd[i * ss])), acc[i]);
  }
}

// Rows [i0, i0 + 16) of x (those past n computed but not stored; their scales are zero-padded by
// the backend) against the packed panel.
template <class F>
void AmxTile(const MatMulArgs& a, const AmxPanel& p, int64_t i0, int64_t r0, int valid) {
  const int64_t nb = a.n_cols / 32;
  const int64_t ss = a.x.scale_stride;
  alignas(64) int32_t c0[kRows][kRows];
  alignas(64) int32_t c1[kRows][kRows];
  __m512 acc[kRows];
#pragma GCC unroll 16
  for (int i = 0; i < kRows; ++i) acc[i] = _mm512_setzero_ps();
  const int8_t* xq = a.x.qs + i0 * a.n_cols;
  const float* xd = a.x.d + i0 * ss;
  const uint8_t* tiles = p.b.data();
  int64_t b = 0;
  for (; b + 2 <= nb; b += 2) {
    _tile_zero(0);
    _tile_zero(3);
    _tile_loadd(1, xq + 32 * b, a.n_cols);
    _tile_loadd(2, tiles + b * 512, 64);
    _tile_loadd(4, xq + 32 * (b + 1), a.n_cols);
    _tile_loadd(5, tiles + (b + 1) * 512, 64);
    if constexpr (F::kSigned) {
      _tile_dpbssd(0, 1, 2);
      _tile_dpbssd(3, 4, 5);
    } else {
      _tile_dpbsud(0, 1, 2);
      _tile_dpbsud(3, 4, 5);
    }
    _tile_stored(0, c0, 64);
    _tile_stored(3, c1, 64);
    ApplyScales(c0, _mm512_loadu_ps(p.d.data() + b * kRows), xd + b, ss, acc);
    ApplyScales(c1, _mm512_loadu_ps(p.d.data() + (b + 1) * kRows), xd + b + 1, ss, acc);
  }
  if (b < nb) {
    _tile_zero(0);
    _tile_loadd(1, xq + 32 * b, a.n_cols);
    _tile_loadd(2, tiles + b * 512, 64);
    if constexpr (F::kSigned) {
      _tile_dpbssd(0, 1, 2);
    } else {
      _tile_dpbsud(0, 1, 2);
    }
    _tile_stored(0, c0, 64);
    ApplyScales(c0, _mm512_loadu_ps(p.d.data() + b * kRows), xd + b, ss, acc);
  }
  const int rows_x = static_cast<int>(std::min<int64_t>(kRows, a.n - i0));
  const __mmask16 mask = static_cast<__mmask16>((1u << valid) - 1);
  for (int i = 0; i < rows_x; ++i) {
    __m512 y = acc[i];
    if constexpr (F::kHasMin) {
      const float* xs = a.x.s + (i0 + i) * ss;
      __m512 acc_min = _mm512_setzero_ps();
      for (int64_t k = 0; k < nb; ++k) {
        acc_min = _mm512_fmadd_ps(_mm512_loadu_ps(p.m.data() + k * kRows), _mm512_set1_ps(xs[k]), acc_min);
      }
      y = _mm512_add_ps(y, acc_min);
    }
    _mm512_mask_storeu_ps(a.y + (i0 + i) * a.n_rows + r0, mask, y);
  }
}

template <class F>
void MatMulRowsAmx(const MatMulArgs& a, int64_t r_begin, int64_t r_end) {
  if (a.n < kAmxMinRows) {
    for (int64_t r0 = r_begin; r0 < r_end; r0 += kRows) {
      const int valid = static_cast<int>(std::min<int64_t>(kRows, r_end - r0));
      for (int64_t i = 0; i < a.n; ++i) DecodeTile<F>(a, i, r0, valid);
    }
    return;
  }
  TileConfig config = {};
  config.palette_id = 1;
  for (int set = 0; set < 2; ++set) {
    config.rows[3 * set + 0] = kRows;  // C
    config.colsb[3 * set + 0] = kRows * 4;
    config.rows[3 * set + 1] = kRows;  // A
    config.colsb[3 * set + 1] = 32;
    config.rows[3 * set + 2] = 8;      // B
    config.colsb[3 * set + 2] = 64;
  }
  _tile_loadconfig(&config);
  AmxPanel& p = ThreadPanel();
  for (int64_t r0 = r_begin; r0 < r_end; r0 += kRows) {
    const int valid = static_cast<int>(std::min<int64_t>(kRows, r_end - r0));
    PackPanel<F>(a, r0, valid, p);
    for (int64_t i0 = 0; i0 < a.n; i0 += kRows) AmxTile<F>(a, p, i0, r0, valid);
  }
  _tile_release();
}

}  // namespace

void FillAmxKernels(IsaKernels* k) {
  k->isa = CpuIsa::kAmx;
  if constexpr (!kGgmlExactMatMul) {
    k->matmul_q4_0 = MatMulRowsAmx<FormatQ4_0>;
    k->matmul_q4_1 = MatMulRowsAmx<FormatQ4_1>;
    k->matmul_q8_0 = MatMulRowsAmx<FormatQ8_0>;
  }
}

}  // namespace baton::kernels

#if defined(__clang__)
#pragma clang attribute pop
#endif
