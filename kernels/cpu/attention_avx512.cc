// Attention and the SiLU-gated product of the avx512-vnni and amx levels (see isa_kernels.h).
//
// Attention is FlashAttention-style, as at the AVX2 level (attention_avx2.cc, whose fold and
// finish it shares): over a segment's keys in chunks of 16 (one key per lane), with an online
// softmax in f32. Per chunk and head: each key's score is a product and fma chain over the
// head's 16-float vectors, its lanes then summed (ReduceAdd16x16, 16 keys at once), times the
// scale; lanes past the query's last key are -inf; m' = max(m, max score), corr = exp(m - m'),
// p = exp(score - m'), l = l * corr + (sum of p), acc = acc * corr + sum over the keys in order of
// p * V. exp is GGML's ggml_v_expf.
// Several queries go through a segment together (AttentionPartialQueriesFn): each chunk's K and
// V rows are converted from f16 once for all of their heads, which a prefill's queries share; a
// single query (decode) reads them straight from the cache where head_dim is whole vectors. A
// query's heads of one kv head go through each chunk together, up to 4 at a time: their chains
// overlap and they share V's loads.
//
// Batch invariance: chunk boundaries are fixed token indices (t_begin is a multiple of the
// segment), and each head's arithmetic depends only on its query, its last key and the cache.
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <utility>

#include "kernels/backend.h"
#include "kernels/cpu/isa_kernels.h"
#include "kernels/cpu/kv_prefetch.h"

// Everything below may use AVX-512 F/BW/VL/DQ besides AVX2, FMA and F16C (headers are above).
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq"))), apply_to = function)
#else
#pragma GCC target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq")
#endif
#if !defined(__clang__)  // a GCC-only warning
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#pragma GCC diagnostic ignored "-Wuninitialized"

namespace baton::kernels {
namespace {

constexpr int kChunk = 16;  // keys per online-softmax step: one per lane

// exp(x) on 16 floats as GGML computes it on AVX-512 (ggml_v_expf, after Arm's optimized-routines
// expf): n = round(x / ln 2) through the 1.5 * 2^23 shift, reduced argument b = x - n ln 2 in two
// fused steps, the degree-5 polynomial ((c5 b + c4) u + (c3 b + c2)) u + (c1 b + 1) with u = b^2,
// scaled by 2^n (vscalefps); |n| > 192 gives 0 (n <= 0) or infinity. Error about 1.5 ulp.
inline __m512 ExpGgml(__m512 x) {
  const __m512 shift = _mm512_set1_ps(0x1.8p23f);
  const __m512 z = _mm512_fmadd_ps(x, _mm512_set1_ps(0x1.715476p+0f), shift);
  const __m512 n = _mm512_sub_ps(z, shift);
  const __m512 b = _mm512_fnmadd_ps(n, _mm512_set1_ps(0x1.7f7d1cp-20f),
                                    _mm512_fnmadd_ps(n, _mm512_set1_ps(0x1.62e4p-1f), x));
  const __mmask16 out_of_range =
      _mm512_cmp_ps_mask(_mm512_abs_ps(n), _mm512_set1_ps(192.0f), _CMP_GT_OQ);
  const __m512 u = _mm512_mul_ps(b, b);
  const __m512 high = _mm512_fmadd_ps(
      _mm512_fmadd_ps(_mm512_set1_ps(0x1.0e4020p-7f), b, _mm512_set1_ps(0x1.573e2ep-5f)), u,
      _mm512_fmadd_ps(_mm512_set1_ps(0x1.555e66p-3f), b, _mm512_set1_ps(0x1.fffdb6p-2f)));
  const __m512 poly =
      _mm512_fmadd_ps(high, u, _mm512_fmadd_ps(_mm512_set1_ps(0x1.ffffecp-1f), b, _mm512_set1_ps(1.0f)));
  const __m512 result = _mm512_scalef_ps(poly, n);
  if (out_of_range == 0) return result;
  const __m512 zero = _mm512_setzero_ps();
  const __m512 limit = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(n, zero, _CMP_LE_OQ),
                                            _mm512_set1_ps(INFINITY), zero);
  return _mm512_mask_blend_ps(out_of_range, result, limit);
}

// The 16 sums of 16 vectors at once: lane t of the result is the sum of r[t]'s lanes (GCC's
// _mm512_reduce_add_ps tree: halves, quarters, then (0 + 2) + (1 + 3)), shared by shuffles.
inline __m512 ReduceAdd16x16(const __m512* r) {
  __m512 c[8], d[4], e[2];
#pragma GCC unroll 8
  for (int m = 0; m < 8; ++m) {  // halves: [r[2m] lanes i + (8 + i) | r[2m + 1] the same]
    c[m] = _mm512_add_ps(_mm512_shuffle_f32x4(r[2 * m], r[2 * m + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                         _mm512_shuffle_f32x4(r[2 * m], r[2 * m + 1], _MM_SHUFFLE(3, 2, 3, 2)));
  }
#pragma GCC unroll 8
  for (int m = 0; m < 4; ++m) {  // quarters: vectors 4m .. 4m + 3, lanes i + (4 + i)
    d[m] = _mm512_add_ps(_mm512_shuffle_f32x4(c[2 * m], c[2 * m + 1], _MM_SHUFFLE(2, 0, 2, 0)),
                         _mm512_shuffle_f32x4(c[2 * m], c[2 * m + 1], _MM_SHUFFLE(3, 1, 3, 1)));
  }
#pragma GCC unroll 8
  for (int m = 0; m < 2; ++m) {  // lanes 0 + 2 and 1 + 3 of each quarter
    e[m] = _mm512_add_ps(_mm512_shuffle_ps(d[2 * m], d[2 * m + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                         _mm512_shuffle_ps(d[2 * m], d[2 * m + 1], _MM_SHUFFLE(3, 2, 3, 2)));
  }
  const __m512 f = _mm512_add_ps(_mm512_shuffle_ps(e[0], e[1], _MM_SHUFFLE(2, 0, 2, 0)),
                                 _mm512_shuffle_ps(e[0], e[1], _MM_SHUFFLE(3, 1, 3, 1)));
  // Lane 4q + s of f is vector q + 4s.
  const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  return _mm512_permutexvar_ps(order, f);
}

// The chunk's K and V rows, converted to f32 (rows past the chunk's last key: K zero, V unread).
struct ChunkRows {
  alignas(64) float k[kChunk][kAttentionLatentHeadDim];
  alignas(64) float v[kChunk][kAttentionLatentHeadDim];
};

// Converts the K and V rows of tokens [t0, t0 + count) of kv head kv_h into rows; `vectors`
// 16-float vectors per row, the last masked by `tail`.
void LoadChunk(const KvLayerView& kv, int32_t kv_h, int32_t t0, int count, int vectors,
               __mmask16 tail, ChunkRows* rows) {
  for (int c = 0; c < kChunk; ++c) {
    if (c >= count) {
      for (int v = 0; v < vectors; ++v) {
        _mm512_store_ps(&rows->k[c][16 * v], _mm512_setzero_ps());
      }
      continue;
    }
    const int64_t offset = kv.RowOffset(t0 + c, kv_h);
    for (int v = 0; v < vectors; ++v) {
      const __mmask16 m = v + 1 == vectors ? tail : __mmask16{0xffff};
      const __m256i k16 = _mm256_maskz_loadu_epi16(m, kv.k_base + offset + 16 * v);
      const __m256i v16 = _mm256_maskz_loadu_epi16(m, kv.v_base + offset + 16 * v);
      _mm512_store_ps(&rows->k[c][16 * v], _mm512_cvtph_ps(k16));
      _mm512_store_ps(&rows->v[c][16 * v], _mm512_cvtph_ps(v16));
    }
  }
}

// Where TileChunk reads a chunk's K and V rows, one 16-float vector v of key c's row at a time.
// ConvertedRows: LoadChunk's f32 copy, converted once for the several queries that share it.
// CacheRows: the cache itself, each vector converted as it is read (one query shares nothing, and
// a copy would cost a store and a load per vector); whole vectors only (head_dim % 16 == 0).
// Both give the same values: the conversion from f16 is exact.
struct ConvertedRows {
  const ChunkRows* rows;
  __m512 K(int c, int v) const { return _mm512_load_ps(&rows->k[c][16 * v]); }
  __m512 V(int c, int v) const { return _mm512_load_ps(&rows->v[c][16 * v]); }
};

struct CacheRows {
  const uint16_t* k[kChunk];
  const uint16_t* v[kChunk];

  // Tokens [t0, t0 + count) of kv head kv_h; the keys past count read key t0's row (their scores
  // are masked).
  CacheRows(const KvLayerView& kv, int32_t kv_h, int32_t t0, int count) {
    for (int c = 0; c < kChunk; ++c) {
      const int64_t offset = kv.RowOffset(t0 + (c < count ? c : 0), kv_h);
      k[c] = kv.k_base + offset;
      v[c] = kv.v_base + offset;
    }
  }
  static __m512 Load(const uint16_t* p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  __m512 K(int c, int vec) const { return Load(k[c] + 16 * vec); }
  __m512 V(int c, int vec) const { return Load(v[c] + 16 * vec); }
};

// Heads that go through a chunk together (one query's heads of one kv head): their independent
// chains overlap, and they share each V vector's load.
constexpr int kMaxTileHeads = 4;

// Vectors per pass over V: the largest divisor of kVectors whose kHeads x pass accumulators fit
// in 16 registers.
constexpr int PassVectors(int vectors, int heads) {
  for (int pass = std::min(vectors, std::max(1, 16 / heads)); pass > 1; --pass) {
    if (vectors % pass == 0) return pass;
  }
  return 1;
}

// The online-softmax step of kHeads heads, q [kHeads, 16 * kVectors] and state [kHeads,
// AttentionPartialSize] (m, l, acc as in a partial, isa_kernels.h), over a chunk whose first
// `count` keys are theirs. Each head's arithmetic is the same for any kHeads.
template <int kVectors, int kHeads, class Rows>
void TileChunk(const float* q, const Rows& rows, int count, float scale, float* state) {
  constexpr int kDim = 16 * kVectors;
  constexpr int kStateStride = 2 + kDim;
  const __mmask16 live = static_cast<__mmask16>((1u << count) - 1);
  __m512 scores[kHeads];
#pragma GCC unroll 4
  for (int h = 0; h < kHeads; ++h) {
    __m512 r[kChunk];
    const __m512 q0 = _mm512_loadu_ps(q + h * kDim);
#pragma GCC unroll 16
    for (int c = 0; c < kChunk; ++c) r[c] = _mm512_mul_ps(rows.K(c, 0), q0);
#pragma GCC unroll 16
    for (int v = 1; v < kVectors; ++v) {
      const __m512 qv = _mm512_loadu_ps(q + h * kDim + 16 * v);
#pragma GCC unroll 16
      for (int c = 0; c < kChunk; ++c) r[c] = _mm512_fmadd_ps(rows.K(c, v), qv, r[c]);
    }
    scores[h] = _mm512_mask_blend_ps(live, _mm512_set1_ps(-INFINITY),
                                     _mm512_mul_ps(ReduceAdd16x16(r), _mm512_set1_ps(scale)));
  }
  alignas(64) float p[kHeads][kChunk];
  float corr[kHeads];
#pragma GCC unroll 4
  for (int h = 0; h < kHeads; ++h) {
    float* st = state + h * kStateStride;
    const float m_new = std::fmax(st[0], _mm512_reduce_max_ps(scores[h]));
    corr[h] = _mm512_cvtss_f32(ExpGgml(_mm512_set1_ps(st[0] - m_new)));
    const __m512 ph = ExpGgml(_mm512_sub_ps(scores[h], _mm512_set1_ps(m_new)));
    st[0] = m_new;
    st[1] = st[1] * corr[h] + _mm512_reduce_add_ps(ph);
    _mm512_store_ps(p[h], ph);
  }
  constexpr int kPass = PassVectors(kVectors, kHeads);
  for (int v0 = 0; v0 < kVectors; v0 += kPass) {
    __m512 a[kHeads][kPass];
#pragma GCC unroll 4
    for (int h = 0; h < kHeads; ++h) {
      const __m512 corr_h = _mm512_set1_ps(corr[h]);
#pragma GCC unroll 16
      for (int j = 0; j < kPass; ++j) {
        a[h][j] = _mm512_mul_ps(_mm512_loadu_ps(state + h * kStateStride + 2 + 16 * (v0 + j)),
                                corr_h);
      }
    }
    for (int c = 0; c < count; ++c) {
#pragma GCC unroll 16
      for (int j = 0; j < kPass; ++j) {
        const __m512 vv = rows.V(c, v0 + j);
#pragma GCC unroll 4
        for (int h = 0; h < kHeads; ++h) {
          a[h][j] = _mm512_fmadd_ps(_mm512_set1_ps(p[h][c]), vv, a[h][j]);
        }
      }
    }
#pragma GCC unroll 4
    for (int h = 0; h < kHeads; ++h) {
#pragma GCC unroll 16
      for (int j = 0; j < kPass; ++j) {
        _mm512_storeu_ps(state + h * kStateStride + 2 + 16 * (v0 + j), a[h][j]);
      }
    }
  }
}

template <class Rows>
using TileChunkFn = void (*)(const float*, const Rows&, int, float, float*);

template <class Rows, int... kVectors>
constexpr auto TileChunkTable(std::integer_sequence<int, kVectors...>) {
  using Row = std::array<TileChunkFn<Rows>, kMaxTileHeads>;
  return std::array<Row, sizeof...(kVectors)>{
      Row{TileChunk<kVectors + 1, 1, Rows>, TileChunk<kVectors + 1, 2, Rows>,
          TileChunk<kVectors + 1, 3, Rows>, TileChunk<kVectors + 1, 4, Rows>}...};
}

// [vectors - 1][heads - 1]: the step for heads of 16 * vectors floats, up to
// kAttentionMaxHeadDim; and latent attention's.
template <class Rows>
constexpr auto kTileChunks =
    TileChunkTable<Rows>(std::make_integer_sequence<int, kAttentionMaxHeadDim / 16>());
constexpr int kLatentVectors = kAttentionLatentHeadDim / 16;
template <class Rows>
constexpr std::array<TileChunkFn<Rows>, kMaxTileHeads> kLatentTileChunks = {
    TileChunk<kLatentVectors, 1, Rows>, TileChunk<kLatentVectors, 2, Rows>,
    TileChunk<kLatentVectors, 3, Rows>, TileChunk<kLatentVectors, 4, Rows>};

// One query's `group` heads, q [group, 16 * vectors] and state [group, AttentionPartialSize],
// through a chunk, kMaxTileHeads at a time.
template <class Rows>
void GroupChunk(const float* q, int32_t group, int vectors, const Rows& rows, int count,
                float scale, float* state) {
  const int64_t d = 16 * vectors;
  for (int32_t g0 = 0; g0 < group; g0 += kMaxTileHeads) {
    const int heads = std::min<int32_t>(kMaxTileHeads, group - g0);
    const TileChunkFn<Rows> step = vectors == kLatentVectors
                                       ? kLatentTileChunks<Rows>[heads - 1]
                                       : kTileChunks<Rows>[vectors - 1][heads - 1];
    step(q + g0 * d, rows, count, scale, state + g0 * AttentionPartialSize(d));
  }
}

// Chunks ahead whose rows are asked for: enough to cover a memory access.
constexpr int32_t kPrefetchChunks = 2;

// AttentionPartialAvx512 for whole vectors: the rows read from the cache as they are used.
void AttentionPartialFromCache(const float* q, int32_t kv_h, int32_t group, int32_t t_begin,
                               int32_t t_end, const KvLayerView& kv, float scale,
                               float* partial) {
  AttentionInitState(group, kv.head_dim, partial);
  PrefetchKvRows(kv, kv_h, t_begin, std::min(t_end, t_begin + kPrefetchChunks * kChunk));
  for (int32_t t0 = t_begin; t0 < t_end; t0 += kChunk) {
    const int32_t ahead = t0 + kPrefetchChunks * kChunk;
    PrefetchKvRows(kv, kv_h, ahead, std::min(t_end, ahead + kChunk));
    const int count = std::min(kChunk, t_end - t0);
    GroupChunk(q, group, kv.head_dim / 16, CacheRows(kv, kv_h, t0, count), count, scale,
               partial);
  }
}

void AttentionPartialQueriesAvx512(const float* q, int64_t q_stride, int32_t n_q,
                                   const int32_t* t_end, int32_t kv_h, int32_t group,
                                   int32_t t_begin, const KvLayerView& kv, float scale,
                                   float* partial, int64_t partial_stride) {
  const int d = kv.head_dim;
  const int vectors = (d + 15) / 16;
  const __mmask16 tail = static_cast<__mmask16>(d % 16 == 0 ? 0xffff : (1u << (d % 16)) - 1);
  if (n_q == 1 && d % 16 == 0) {
    if (t_end[0] > t_begin) {
      AttentionPartialFromCache(q, kv_h, group, t_begin, t_end[0], kv, scale, partial);
    }
    return;
  }
  const int64_t size = AttentionPartialSize(d);
  int32_t last = t_begin;
  for (int32_t j = 0; j < n_q; ++j) {
    if (t_end[j] <= t_begin) continue;
    last = std::max(last, t_end[j]);
    AttentionInitState(group, d, partial + j * partial_stride);
  }
  static thread_local ChunkRows rows;
  const ConvertedRows converted{&rows};
  PrefetchKvRows(kv, kv_h, t_begin, std::min(last, t_begin + kPrefetchChunks * kChunk));
  for (int32_t t0 = t_begin; t0 < last; t0 += kChunk) {
    const int32_t ahead = t0 + kPrefetchChunks * kChunk;
    PrefetchKvRows(kv, kv_h, ahead, std::min(last, ahead + kChunk));
    LoadChunk(kv, kv_h, t0, std::min(kChunk, last - t0), vectors, tail, &rows);
    for (int32_t j = 0; j < n_q; ++j) {
      if (t_end[j] <= t0) continue;
      const int count = std::min(kChunk, t_end[j] - t0);
      if (d % 16 == 0) {
        GroupChunk(q + j * q_stride, group, vectors, converted, count, scale,
                   partial + j * partial_stride);
        continue;
      }
      // A head dimension that is not a whole number of vectors: q and acc padded with zeros.
      for (int32_t g = 0; g < group; ++g) {
        alignas(64) float qp[kAttentionMaxHeadDim] = {};
        alignas(64) float padded[2 + kAttentionMaxHeadDim];
        float* state = partial + j * partial_stride + g * size;
        std::memcpy(qp, q + j * q_stride + static_cast<int64_t>(g) * d, d * sizeof(float));
        std::memset(padded, 0, sizeof padded);
        std::memcpy(padded, state, size * sizeof(float));
        GroupChunk(qp, 1, vectors, converted, count, scale, padded);
        std::memcpy(state, padded, size * sizeof(float));
      }
    }
  }
}

void AttentionPartialAvx512(const float* q, int32_t kv_h, int32_t group, int32_t t_begin,
                            int32_t t_end, const KvLayerView& kv, float scale, float* partial) {
  AttentionPartialQueriesAvx512(q, 0, 1, &t_end, kv_h, group, t_begin, kv, scale, partial, 0);
}

// GGML's ggml_vec_swiglu_f32 on AVX-512: (g / (1 + exp(0 - g))) * u, the tail through the same
// (masked) lanes so that every element gets the same arithmetic.
inline __m512 SiluMul16(__m512 g, __m512 u) {
  const __m512 e = ExpGgml(_mm512_sub_ps(_mm512_setzero_ps(), g));
  return _mm512_mul_ps(_mm512_div_ps(g, _mm512_add_ps(_mm512_set1_ps(1.0f), e)), u);
}

void SiluMulAvx512(const float* gate, const float* up, int64_t count, float* y) {
  int64_t i = 0;
  for (; i + 16 <= count; i += 16) {
    _mm512_storeu_ps(y + i, SiluMul16(_mm512_loadu_ps(gate + i), _mm512_loadu_ps(up + i)));
  }
  if (i < count) {
    const __mmask16 m = static_cast<__mmask16>((1u << (count - i)) - 1);
    _mm512_mask_storeu_ps(y + i, m, SiluMul16(_mm512_maskz_loadu_ps(m, gate + i),
                                              _mm512_maskz_loadu_ps(m, up + i)));
  }
}

}  // namespace

void FillAvx512AttentionKernels(IsaKernels* k) {
  k->attention_partial = AttentionPartialAvx512;
  k->attention_partial_queries = AttentionPartialQueriesAvx512;
  k->silu_mul = SiluMulAvx512;
}

}  // namespace baton::kernels

#if defined(__clang__)
#pragma clang attribute pop
#endif
