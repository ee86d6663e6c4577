// MatMul kernels on packed Q4_0 / Q4_1 / Q8_0 weights (packed_block32.h, which defines their one
// arithmetic per output): both give the bits of MatMulPackedScalar, so a row's result does not
// depend on the batch it is in.
//   - Direct (AVX-512 VNNI; decode and small batches): one activation row against one group of
//     16 weight rows. Per block, vpdpbusd of each packed vector (one dword of all 16 rows) with
//     the activation dword broadcast leaves the 16 rows' exact block sums in the 16 lanes, with
//     no reduction; then one fma per block for the 16 outputs. The packed matrix streams from
//     memory contiguously, group after group.
//   - AMX (batches of kAmxMinRows rows or more): per group, the B tiles of all its blocks are
//     unpacked once (Q4: nibbles to bytes) and each 16-row tile of activations runs TDPBSUD /
//     TDPBSSD over one block at a time into a 16 x 16 int32 tile; AVX-512 then applies the scales
//     in the same fma order, one zmm per activation row holding its 16 outputs.
// Signed weights (Q8_0) in the direct kernel: vpdpbusd multiplies u8 by s8, so it takes |w| and
// x with w's sign (exact, the same sum).
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "kernels/cpu/isa_kernels.h"
#include "kernels/cpu/packed_block32.h"

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,amx-tile,amx-int8"))), apply_to = function)
#else
#pragma GCC target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,amx-tile,amx-int8")
#endif
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

namespace baton::kernels {
namespace {

constexpr int kRows = kPackedGroupRows;
constexpr int kAmxMinRows = 4;

template <DType kDType>
struct Packed {
  static constexpr bool kQ8 = kDType == DType::kQ8_0;
  static constexpr int kVectors = kQ8 ? 8 : 4;  // 64-byte value vectors per group block
  static constexpr int kValueBytes = 64 * kVectors;
  static constexpr int kBlockBytes = kValueBytes + (kDType == DType::kQ4_1 ? 64 : 32);
};

inline __m512 LoadHalf16(const uint8_t* p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}

inline __m512i BroadcastDword(const int8_t* p) {
  return _mm512_set1_epi32(*reinterpret_cast<const int32_t*>(p));
}

// The exact block sums of the 16 rows of a group block against one activation block xq.
template <DType kDType>
inline __m512i BlockSums(const uint8_t* blk, const int8_t* xq) {
  using P = Packed<kDType>;
  __m512i s[4];
  if constexpr (P::kQ8) {
#pragma GCC unroll 8
    for (int v = 0; v < 8; ++v) {
      const __m512i w = _mm512_loadu_si512(blk + 64 * v);
      const __m512i x = BroadcastDword(xq + 4 * v);
      const __m512i x_signed = _mm512_mask_sub_epi8(x, _mm512_movepi8_mask(w), _mm512_setzero_si512(), x);
      if (v < 4) {
        s[v] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_abs_epi8(w), x_signed);
      } else {
        s[v - 4] = _mm512_dpbusd_epi32(s[v - 4], _mm512_abs_epi8(w), x_signed);
      }
    }
  } else {
    const __m512i low = _mm512_set1_epi8(0x0f);
#pragma GCC unroll 4
    for (int v = 0; v < 4; ++v) {
      const __m512i w = _mm512_loadu_si512(blk + 64 * v);
      s[v] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_and_si512(w, low),
                                 BroadcastDword(xq + 4 * v));
      s[v] = _mm512_dpbusd_epi32(s[v], _mm512_and_si512(_mm512_srli_epi16(w, 4), low),
                                 BroadcastDword(xq + 16 + 4 * v));
    }
  }
  return _mm512_add_epi32(_mm512_add_epi32(s[0], s[1]), _mm512_add_epi32(s[2], s[3]));
}

// acc_min's step for block b: fma(m_w, s_x, acc_min).
template <DType kDType>
inline __m512 MinStep(const uint8_t* blk, float s_x, __m512 acc_min) {
  using P = Packed<kDType>;
  if constexpr (kDType == DType::kQ4_1) {
    return _mm512_fmadd_ps(LoadHalf16(blk + P::kValueBytes + 32), _mm512_set1_ps(s_x), acc_min);
  } else if constexpr (kDType == DType::kQ4_0) {
    const __m512 m = _mm512_mul_ps(LoadHalf16(blk + P::kValueBytes), _mm512_set1_ps(-8.0f));
    return _mm512_fmadd_ps(m, _mm512_set1_ps(s_x), acc_min);
  } else {
    return acc_min;
  }
}

template <DType kDType>
inline void Store(const MatMulArgs& a, int64_t i, int64_t r0, int valid, __m512 acc, __m512 acc_min) {
  const __m512 y = kDType == DType::kQ8_0 ? acc : _mm512_add_ps(acc, acc_min);
  _mm512_mask_storeu_ps(a.y + i * a.n_rows + r0, static_cast<__mmask16>((1u << valid) - 1), y);
}

// ---- direct kernel ----------------------------------------------------------------------------

template <DType kDType>
void DirectGroup(const MatMulArgs& a, int64_t i, int64_t g, int valid) {
  using P = Packed<kDType>;
  const int64_t nb = a.n_cols / 32;
  const int64_t ss = a.x.scale_stride;
  const uint8_t* group = a.w + g * nb * P::kBlockBytes;
  const int8_t* xq = a.x.qs + i * a.n_cols;
  const float* xd = a.x.d + i * ss;
  const float* xs = a.x.s + i * ss;
  __m512 acc = _mm512_setzero_ps(), acc_min = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* blk = group + b * P::kBlockBytes;
    _mm_prefetch(reinterpret_cast<const char*>(blk + 8 * P::kBlockBytes), _MM_HINT_T0);
    const __m512i s = BlockSums<kDType>(blk, xq + 32 * b);
    const __m512 scale = _mm512_mul_ps(LoadHalf16(blk + P::kValueBytes), _mm512_set1_ps(xd[b]));
    acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), scale, acc);
    acc_min = MinStep<kDType>(blk, xs[b], acc_min);
  }
  Store<kDType>(a, i, g * kRows, valid, acc, acc_min);
}

// ---- AMX kernel --------------------------------------------------------------------------------

struct alignas(64) TileConfig {
  uint8_t palette_id;
  uint8_t start_row;
  uint8_t reserved[14];
  uint16_t colsb[16];
  uint8_t rows[16];
};

// Tiles: tmm0, tmm3 C (16 x 16 int32); tmm1, tmm4 A (16 activation rows x 32 bytes, one block);
// tmm2, tmm5 B (8 x 64 bytes: the group's 16 rows x 32 values, dword-interleaved). Two sets, so
// that two blocks are in flight.
// (A static object: GCC treats a local config's stores as dead, since it does not see
// ldtilecfg read them.)
void LoadTileConfig() {
  static const TileConfig config = [] {
    TileConfig c = {};
    c.palette_id = 1;
    for (int set = 0; set < 2; ++set) {
      c.rows[3 * set + 0] = kRows;
      c.colsb[3 * set + 0] = kRows * 4;
      c.rows[3 * set + 1] = kRows;
      c.colsb[3 * set + 1] = 32;
      c.rows[3 * set + 2] = 8;
      c.colsb[3 * set + 2] = 64;
    }
    return c;
  }();
  _tile_loadconfig(&config);
}

// One group unpacked for the AMX kernel; reused across calls of a thread.
struct AmxGroup {
  std::vector<uint8_t> b;  // [blocks][8][64] B tiles
  std::vector<float> d;    // [blocks][16]
  std::vector<float> m;    // [blocks][16] (Q4_0: -8 d)
};

AmxGroup& ThreadGroup() {
  static thread_local AmxGroup group;
  return group;
}

template <DType kDType>
void UnpackGroup(const MatMulArgs& a, int64_t g, AmxGroup& u) {
  using P = Packed<kDType>;
  const int64_t nb = a.n_cols / 32;
  u.b.resize(static_cast<size_t>(nb * 512));
  u.d.resize(static_cast<size_t>(nb * kRows));
  u.m.resize(static_cast<size_t>(nb * kRows));
  const uint8_t* group = a.w + g * nb * P::kBlockBytes;
  const __m512i low = _mm512_set1_epi8(0x0f);
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* blk = group + b * P::kBlockBytes;
    uint8_t* tile = u.b.data() + b * 512;
    if constexpr (P::kQ8) {
      for (int v = 0; v < 8; ++v) _mm512_storeu_si512(tile + 64 * v, _mm512_loadu_si512(blk + 64 * v));
    } else {
      for (int v = 0; v < 4; ++v) {
        const __m512i w = _mm512_loadu_si512(blk + 64 * v);
        _mm512_storeu_si512(tile + 64 * v, _mm512_and_si512(w, low));
        _mm512_storeu_si512(tile + 64 * (v + 4), _mm512_and_si512(_mm512_srli_epi16(w, 4), low));
      }
    }
    const __m512 d = LoadHalf16(blk + P::kValueBytes);
    _mm512_storeu_ps(u.d.data() + b * kRows, d);
    if constexpr (kDType == DType::kQ4_1) {
      _mm512_storeu_ps(u.m.data() + b * kRows, LoadHalf16(blk + P::kValueBytes + 32));
    } else if constexpr (kDType == DType::kQ4_0) {
      _mm512_storeu_ps(u.m.data() + b * kRows, _mm512_mul_ps(d, _mm512_set1_ps(-8.0f)));
    }
  }
}

// acc[i] = fma(f32(c[i]), d * d_x[i], acc[i]) for the 16 activation rows of one block's tile c.
inline void ApplyScales(const int32_t (&c)[kRows][kRows], __m512 d, const float* xd, int64_t ss,
                        __m512 (&acc)[kRows]) {
#pragma GCC unroll 16
  for (int i = 0; i < kRows; ++i) {
    acc[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_load_si512(c[i])),
                             _mm512_mul_ps(d, _mm512_set1_ps(xd[i * ss])), acc[i]);
  }
}

// Activation rows [i0, i0 + 16) (rows past n computed, not stored) against unpacked group g.
template <DType kDType>
void AmxTile(const MatMulArgs& a, const AmxGroup& u, int64_t i0, int64_t g, int valid) {
  const int64_t nb = a.n_cols / 32;
  const int64_t ss = a.x.scale_stride;
  alignas(64) int32_t c0[kRows][kRows];
  alignas(64) int32_t c1[kRows][kRows];
  __m512 acc[kRows];
#pragma GCC unroll 16
  for (int i = 0; i < kRows; ++i) acc[i] = _mm512_setzero_ps();
  const int8_t* xq = a.x.qs + i0 * a.n_cols;
  const float* xd = a.x.d + i0 * ss;
  const uint8_t* tiles = u.b.data();
  int64_t b = 0;
  for (; b + 2 <= nb; b += 2) {
    _tile_zero(0);
    _tile_zero(3);
    _tile_loadd(1, xq + 32 * b, a.n_cols);
    _tile_loadd(2, tiles + b * 512, 64);
    _tile_loadd(4, xq + 32 * (b + 1), a.n_cols);
    _tile_loadd(5, tiles + (b + 1) * 512, 64);
    if constexpr (kDType == DType::kQ8_0) {
      _tile_dpbssd(0, 1, 2);
      _tile_dpbssd(3, 4, 5);
    } else {
      _tile_dpbsud(0, 1, 2);
      _tile_dpbsud(3, 4, 5);
    }
    _tile_stored(0, c0, 64);
    _tile_stored(3, c1, 64);
    ApplyScales(c0, _mm512_loadu_ps(u.d.data() + b * kRows), xd + b, ss, acc);
    ApplyScales(c1, _mm512_loadu_ps(u.d.data() + (b + 1) * kRows), xd + b + 1, ss, acc);
  }
  if (b < nb) {
    _tile_zero(0);
    _tile_loadd(1, xq + 32 * b, a.n_cols);
    _tile_loadd(2, tiles + b * 512, 64);
    if constexpr (kDType == DType::kQ8_0) {
      _tile_dpbssd(0, 1, 2);
    } else {
      _tile_dpbsud(0, 1, 2);
    }
    _tile_stored(0, c0, 64);
    ApplyScales(c0, _mm512_loadu_ps(u.d.data() + b * kRows), xd + b, ss, acc);
  }
  const int rows_x = static_cast<int>(std::min<int64_t>(kRows, a.n - i0));
  for (int i = 0; i < rows_x; ++i) {
    __m512 acc_min = _mm512_setzero_ps();
    if constexpr (kDType != DType::kQ8_0) {
      const float* xs = a.x.s + (i0 + i) * ss;
      for (int64_t k = 0; k < nb; ++k) {
        acc_min = _mm512_fmadd_ps(_mm512_loadu_ps(u.m.data() + k * kRows), _mm512_set1_ps(xs[k]), acc_min);
      }
    }
    Store<kDType>(a, i0 + i, g * kRows, valid, acc[i], acc_min);
  }
}

// ---- entry points ----------------------------------------------------------------------------

template <DType kDType>
void MatMulPackedDirect(const MatMulArgs& a, int64_t r_begin, int64_t r_end) {
  for (int64_t r0 = r_begin; r0 < r_end; r0 += kRows) {
    const int valid = static_cast<int>(std::min<int64_t>(kRows, r_end - r0));
    for (int64_t i = 0; i < a.n; ++i) DirectGroup<kDType>(a, i, r0 / kRows, valid);
  }
}

template <DType kDType>
void MatMulPackedAmx(const MatMulArgs& a, int64_t r_begin, int64_t r_end) {
  if (a.n < kAmxMinRows) {
    MatMulPackedDirect<kDType>(a, r_begin, r_end);
    return;
  }
  LoadTileConfig();
  AmxGroup& u = ThreadGroup();
  for (int64_t r0 = r_begin; r0 < r_end; r0 += kRows) {
    const int valid = static_cast<int>(std::min<int64_t>(kRows, r_end - r0));
    UnpackGroup<kDType>(a, r0 / kRows, u);
    for (int64_t i0 = 0; i0 < a.n; i0 += kRows) AmxTile<kDType>(a, u, i0, r0 / kRows, valid);
  }
  _tile_release();
}

}  // namespace

void FillPackedAvx512Kernels(IsaKernels* k) {
  k->matmul_packed_q4_0 = MatMulPackedDirect<DType::kQ4_0>;
  k->matmul_packed_q4_1 = MatMulPackedDirect<DType::kQ4_1>;
  k->matmul_packed_q8_0 = MatMulPackedDirect<DType::kQ8_0>;
}

void FillPackedAmxKernels(IsaKernels* k) {
  k->matmul_packed_q4_0 = MatMulPackedAmx<DType::kQ4_0>;
  k->matmul_packed_q4_1 = MatMulPackedAmx<DType::kQ4_1>;
  k->matmul_packed_q8_0 = MatMulPackedAmx<DType::kQ8_0>;
}

}  // namespace baton::kernels

#if defined(__clang__)
#pragma clang attribute pop
#endif
