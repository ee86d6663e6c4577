// The MatMul kernel on packed Q4_0 / Q4_1 / Q5_0 / Q5_1 / Q8_0 weights (packed_block32.h; the
// backend runs every batch of a registered matrix on it): GGML's arithmetic, the same bits as
// block32_avx512.cc's kernels on the original rows (and as MatMulPackedScalar). One activation
// row against one group of 16 weight rows: per block, for each dword l of the block, one
// vpdpbusd of packed vector l (dword l of all 16 rows) with the activation dword broadcast gives
// GGML's lane sum P[l] of the 16 rows in the 16 lanes, and
// acc[l] = fma(d_w * d_x, f32(P[l]), acc[l]) with acc[l] one zmm per lane; at the end GGML's
// hsum_float_8 is 7 vertical adds. No shuffles, no gathers, and the packed matrix streams from
// memory contiguously, group after group. Activation rows go two at a time through a group
// (DirectGroupPair), sharing each weight vector's load and nibble unpacking; each row's
// arithmetic is unchanged, so batch invariance holds bit for bit.
//
// f32(P) comes from the int32 accumulator started at the bits of 1.5 * 2^23: read as f32 it holds
// 1.5 * 2^23 + P (|P| < 2^22), and one subtraction gives f32(P) exactly. Signed weights: Q8_0
// takes |w| against x with w's sign (vpdpbusd multiplies u8 by s8); Q4_0 (nibble - 8) and Q5_0
// (value - 16) take the unsigned value and subtract 8 (16) * (sum of the activation dword):
// exact, the same sums. Q5's fifth bits come from the packed masks, one masked add per vector.
#include <immintrin.h>

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstring>

#include "kernels/cpu/isa_kernels.h"
#include "kernels/cpu/packed_block32.h"

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni"))), apply_to = function)
#else
#pragma GCC target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni")
#endif
#if !defined(__clang__)  // a GCC-only warning
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#pragma GCC diagnostic ignored "-Wuninitialized"

namespace baton::kernels {
namespace {

constexpr int kRows = kPackedGroupRows;
constexpr int32_t kMagicBits = 0x4b400000;  // 1.5 * 2^23

template <DType kDType>
using Packed = PackedGroupBlock<kDType>;

inline __m512 LoadHalf16(const uint8_t* p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}

inline __m512i BroadcastDword(const int8_t* p) {
  return _mm512_set1_epi32(*reinterpret_cast<const int32_t*>(p));
}

// The accumulator a nibble vpdpbusd starts from against activation dwords x: the magic bits, less
// kOffset * (sum of each dword's 4 activations) for Q4_0 and Q5_0, so that the sum is over
// (value - kOffset) * x.
template <DType kDType>
inline __m512i NibbleStart(__m512i magic, __m512i x) {
  constexpr int kOffset = Packed<kDType>::kOffset;
  if constexpr (kOffset == 0) return magic;
  const __m512i sum = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_set1_epi8(1), x);
  return _mm512_sub_epi32(magic, _mm512_slli_epi32(sum, std::countr_zero(unsigned{kOffset})));
}

// The unsigned values of packed vector v of a nibble format's group block: its low nibbles
// (values 4v + t) and high nibbles (16 + 4v + t), each plus 16 where Q5's fifth bit is set.
template <DType kDType>
inline void NibbleValues(const uint8_t* blk, int v, __m512i* lo, __m512i* hi) {
  const __m512i low = _mm512_set1_epi8(0x0f);
  const __m512i w = _mm512_loadu_si512(blk + 64 * v);
  *lo = _mm512_and_si512(w, low);
  *hi = _mm512_and_si512(_mm512_srli_epi16(w, 4), low);
  if constexpr (Packed<kDType>::kFifthBit) {
    __mmask64 masks[2];  // of vector v's low and high nibbles
    std::memcpy(masks, blk + Packed<kDType>::kFifthOffset + 16 * v, sizeof masks);
    const __m512i sixteen = _mm512_set1_epi8(16);
    *lo = _mm512_mask_add_epi8(*lo, masks[0], *lo, sixteen);
    *hi = _mm512_mask_add_epi8(*hi, masks[1], *hi, sixteen);
  }
}

// GGML's lane sums P[0..8) of the 16 rows of a group block against activation block xq, each as
// 1.5 * 2^23 + P in f32 bits.
template <DType kDType>
inline void LaneSums(const uint8_t* blk, const int8_t* xq, __m512i (&p)[8]) {
  const __m512i magic = _mm512_set1_epi32(kMagicBits);
  if constexpr (kDType == DType::kQ8_0) {
#pragma GCC unroll 8
    for (int l = 0; l < 8; ++l) {
      const __m512i w = _mm512_loadu_si512(blk + 64 * l);
      const __m512i x = BroadcastDword(xq + 4 * l);
      const __m512i x_signed = _mm512_mask_sub_epi8(x, _mm512_movepi8_mask(w), _mm512_setzero_si512(), x);
      p[l] = _mm512_dpbusd_epi32(magic, _mm512_abs_epi8(w), x_signed);
    }
  } else {
#pragma GCC unroll 4
    for (int v = 0; v < 4; ++v) {
      __m512i w_lo, w_hi;
      NibbleValues<kDType>(blk, v, &w_lo, &w_hi);
      const __m512i x_lo = BroadcastDword(xq + 4 * v);
      const __m512i x_hi = BroadcastDword(xq + 16 + 4 * v);
      p[v] = _mm512_dpbusd_epi32(NibbleStart<kDType>(magic, x_lo), w_lo, x_lo);
      p[v + 4] = _mm512_dpbusd_epi32(NibbleStart<kDType>(magic, x_hi), w_hi, x_hi);
    }
  }
}

// GGML's hsum_float_8 of one row's lane accumulators (plus its Q4_1 minima), stored as its 16 (or
// `valid`) outputs of group g.
template <DType kDType>
inline void StoreGroup(const MatMulArgs& a, int64_t i, int64_t g, int valid, const __m512 (&acc)[8],
                       __m512 summs) {
  __m512 y = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(acc[0], acc[4]), _mm512_add_ps(acc[2], acc[6])),
                           _mm512_add_ps(_mm512_add_ps(acc[1], acc[5]), _mm512_add_ps(acc[3], acc[7])));
  if constexpr (Packed<kDType>::kHasMin) y = _mm512_add_ps(y, summs);
  _mm512_mask_storeu_ps(a.y + i * a.n_rows + g * kRows, static_cast<__mmask16>((1u << valid) - 1), y);
}

template <DType kDType>
void DirectGroup(const MatMulArgs& a, int64_t i, int64_t g, int valid) {
  using P = Packed<kDType>;
  const int64_t nb = a.n_cols / 32;
  const int64_t ss = a.x.scale_stride;
  const uint8_t* group = a.w + g * nb * P::kBlockBytes;
  const int8_t* xq = a.x.qs + i * a.n_cols;
  const float* xd = a.x.d + i * ss;
  const float* xs = a.x.s + i * ss;
  const __m512 magic_f = _mm512_castsi512_ps(_mm512_set1_epi32(kMagicBits));
  __m512 acc[8];
#pragma GCC unroll 8
  for (int l = 0; l < 8; ++l) acc[l] = _mm512_setzero_ps();
  __m512 summs = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* blk = group + b * P::kBlockBytes;
    _mm_prefetch(reinterpret_cast<const char*>(blk + 4 * P::kBlockBytes), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(blk + 4 * P::kBlockBytes + 64 * 4), _MM_HINT_T0);
    __m512i p[8];
    LaneSums<kDType>(blk, xq + 32 * b, p);
    const __m512 scale = _mm512_mul_ps(LoadHalf16(blk + P::kScaleOffset), _mm512_set1_ps(xd[b]));
#pragma GCC unroll 8
    for (int l = 0; l < 8; ++l) {
      acc[l] = _mm512_fmadd_ps(scale, _mm512_sub_ps(_mm512_castsi512_ps(p[l]), magic_f), acc[l]);
    }
    if constexpr (P::kHasMin) {
      summs = _mm512_fmadd_ps(LoadHalf16(blk + P::kMinOffset), _mm512_set1_ps(xs[b]), summs);
    }
  }
  StoreGroup<kDType>(a, i, g, valid, acc, summs);
}

// DirectGroup for activation rows i and i + 1 at once: each weight vector is loaded and its
// nibbles unpacked once for both. Every accumulator of each row sees the same operations in the
// same order as in DirectGroup, so the bits are the same.
template <DType kDType>
__attribute__((noinline)) void DirectGroupPair(const MatMulArgs& a, int64_t i, int64_t g,
                                               int valid) {
  using P = Packed<kDType>;
  const int64_t nb = a.n_cols / 32;
  const int64_t ss = a.x.scale_stride;
  const uint8_t* group = a.w + g * nb * P::kBlockBytes;
  const int8_t* xq[2] = {a.x.qs + i * a.n_cols, a.x.qs + (i + 1) * a.n_cols};
  const float* xd[2] = {a.x.d + i * ss, a.x.d + (i + 1) * ss};
  const float* xs[2] = {a.x.s + i * ss, a.x.s + (i + 1) * ss};
  const __m512i magic = _mm512_set1_epi32(kMagicBits);
  const __m512 magic_f = _mm512_castsi512_ps(magic);
  __m512 acc[2][8];
  __m512 summs[2];
#pragma GCC unroll 2
  for (int r = 0; r < 2; ++r) {
    summs[r] = _mm512_setzero_ps();
#pragma GCC unroll 8
    for (int l = 0; l < 8; ++l) acc[r][l] = _mm512_setzero_ps();
  }
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* blk = group + b * P::kBlockBytes;
    _mm_prefetch(reinterpret_cast<const char*>(blk + 4 * P::kBlockBytes), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(blk + 4 * P::kBlockBytes + 64 * 4), _MM_HINT_T0);
    const __m512 d_w = LoadHalf16(blk + P::kScaleOffset);
    __m512 scale[2];
#pragma GCC unroll 2
    for (int r = 0; r < 2; ++r) scale[r] = _mm512_mul_ps(d_w, _mm512_set1_ps(xd[r][b]));
    auto add = [&](int r, int l, __m512i p) {
      acc[r][l] = _mm512_fmadd_ps(scale[r], _mm512_sub_ps(_mm512_castsi512_ps(p), magic_f), acc[r][l]);
    };
    if constexpr (kDType == DType::kQ8_0) {
#pragma GCC unroll 8
      for (int l = 0; l < 8; ++l) {
        const __m512i w = _mm512_loadu_si512(blk + 64 * l);
        const __mmask64 negative = _mm512_movepi8_mask(w);
        const __m512i w_abs = _mm512_abs_epi8(w);
#pragma GCC unroll 2
        for (int r = 0; r < 2; ++r) {
          const __m512i x = BroadcastDword(xq[r] + 32 * b + 4 * l);
          const __m512i x_signed = _mm512_mask_sub_epi8(x, negative, _mm512_setzero_si512(), x);
          add(r, l, _mm512_dpbusd_epi32(magic, w_abs, x_signed));
        }
      }
    } else {
#pragma GCC unroll 4
      for (int v = 0; v < 4; ++v) {
        __m512i w_lo, w_hi;
        NibbleValues<kDType>(blk, v, &w_lo, &w_hi);
#pragma GCC unroll 2
        for (int r = 0; r < 2; ++r) {
          const __m512i x_lo = BroadcastDword(xq[r] + 32 * b + 4 * v);
          const __m512i x_hi = BroadcastDword(xq[r] + 32 * b + 16 + 4 * v);
          add(r, v, _mm512_dpbusd_epi32(NibbleStart<kDType>(magic, x_lo), w_lo, x_lo));
          add(r, v + 4, _mm512_dpbusd_epi32(NibbleStart<kDType>(magic, x_hi), w_hi, x_hi));
        }
      }
    }
    if constexpr (P::kHasMin) {
      const __m512 m_w = LoadHalf16(blk + P::kMinOffset);
#pragma GCC unroll 2
      for (int r = 0; r < 2; ++r) summs[r] = _mm512_fmadd_ps(m_w, _mm512_set1_ps(xs[r][b]), summs[r]);
    }
  }
  StoreGroup<kDType>(a, i, g, valid, acc[0], summs[0]);
  StoreGroup<kDType>(a, i + 1, g, valid, acc[1], summs[1]);
}

template <DType kDType>
void MatMulPackedDirect(const MatMulArgs& a, int64_t r_begin, int64_t r_end) {
  for (int64_t r0 = r_begin; r0 < r_end; r0 += kRows) {
    const int valid = static_cast<int>(std::min<int64_t>(kRows, r_end - r0));
    int64_t i = 0;
    for (; i + 1 < a.n; i += 2) DirectGroupPair<kDType>(a, i, r0 / kRows, valid);
    if (i < a.n) DirectGroup<kDType>(a, i, r0 / kRows, valid);
  }
}

}  // namespace

void FillPackedAvx512Kernels(IsaKernels* k) {
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
