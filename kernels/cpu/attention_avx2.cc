// AVX2 + FMA + F16C attention over the paged f16 KV cache and SiLU-gated product (see
// isa_kernels.h). Attention is FlashAttention-style: one pass over a segment's keys in chunks of
// kChunk tokens with an online softmax (running max m and sum l; the output accumulator is
// rescaled by exp(m_old - m_new) when the max grows), computed in f32 and vectorized over
// head_dim. The query heads that share a kv head are processed together, so each K/V vector is
// converted from f16 once for them: one query (a decode's) reads the cache directly, and
// several queries (a prefill's) share each chunk's rows converted once to f32. Scores of 8 keys
// are reduced together (transposed horizontal sums). The rows are asked for a chunk ahead.
//
// Batch invariance: segment and chunk boundaries are fixed token indices, and each head's
// arithmetic does not depend on the other heads or queries.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "kernels/backend.h"
#include "kernels/cpu/isa_kernels.h"
#include "kernels/cpu/kv_prefetch.h"

// Everything below may use AVX2, FMA and F16C (headers are all above).
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c"))), apply_to = function)
#else
#pragma GCC target("avx2,fma,f16c")
#endif

namespace baton::kernels {
namespace {

#include "kernels/cpu/exp_avx2.inc"

constexpr int kChunk = 32;                          // keys per online-softmax step
constexpr int kMaxGroup = 8;                        // query heads processed together
constexpr int kMaxHeadDim = kAttentionLatentHeadDim;  // AttentionTakes; else the reference path

#include "kernels/cpu/horizontal_avx2.inc"
#include "kernels/cpu/rope_rotate.inc"

inline float Exp1(float x) { return _mm256_cvtss_f32(Exp256(_mm256_set1_ps(x))); }

inline __m256 LoadF16x8(const uint16_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

// The sums of the 8 lanes of each of s[0..8), in order.
inline __m256 SumEach8(const __m256 s[8]) {
  const __m256 u0 = _mm256_hadd_ps(_mm256_hadd_ps(s[0], s[1]), _mm256_hadd_ps(s[2], s[3]));
  const __m256 u1 = _mm256_hadd_ps(_mm256_hadd_ps(s[4], s[5]), _mm256_hadd_ps(s[6], s[7]));
  return _mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20), _mm256_permute2f128_ps(u0, u1, 0x31));
}

// Scores of G query heads q [G, d_head] against a chunk's keys c < count8 (a multiple of 8):
// p[g][c] = scale * (q_g . K_c), where rows.K(c, d) gives 8 floats of key c's row from dimension
// d, and before8(c) runs before each 8 keys. Each product is the same arithmetic for any G and
// any row source: lane l's FMAs over dimensions l, l + 8, ... in order, then SumEach8 over the 8
// keys. A K vector serves all G heads; kKeys<G> keys a pass over the head dimension keep G x
// kKeys accumulators (at most 12) beside it.
template <int G>
constexpr int kKeys = G == 1 ? 8 : G <= 3 ? 4 : G <= 5 ? 2 : 1;

template <int G, class KRows, class Before8>
void KeyScores(const float* q, int d_head, const KRows& rows, int count8, __m256 scale,
               float (*p)[kChunk], const Before8& before8) {
  constexpr int kK = kKeys<G>;
  for (int c = 0; c < count8; c += 8) {
    before8(c);
    __m256 dots[G][8];
    for (int i0 = 0; i0 < 8; i0 += kK) {
      __m256 s[G][kK];
#pragma GCC unroll 8
      for (int g = 0; g < G; ++g) {
#pragma GCC unroll 8
        for (int i = 0; i < kK; ++i) s[g][i] = _mm256_setzero_ps();
      }
      for (int d = 0; d < d_head; d += 8) {
#pragma GCC unroll 8
        for (int i = 0; i < kK; ++i) {
          const __m256 kv = rows.K(c + i0 + i, d);
#pragma GCC unroll 8
          for (int g = 0; g < G; ++g) {
            s[g][i] = _mm256_fmadd_ps(_mm256_loadu_ps(q + g * d_head + d), kv, s[g][i]);
          }
        }
      }
#pragma GCC unroll 8
      for (int g = 0; g < G; ++g) {
#pragma GCC unroll 8
        for (int i = 0; i < kK; ++i) dots[g][i0 + i] = s[g][i];
      }
    }
#pragma GCC unroll 8
    for (int g = 0; g < G; ++g) {
      _mm256_store_ps(&p[g][c], _mm256_mul_ps(SumEach8(dots[g]), scale));
    }
  }
}

// Floats per converted row: padded, so that the rows of a chunk do not alias in 4K.
constexpr int kRowStride = kMaxHeadDim + 8;

// A chunk's K rows, and V rows where several queries share them, converted from f16 (exact).
// k's rows past the chunk's last key are zero up to the next multiple of 8 (KeyScores reads 8).
struct ChunkRows {
  alignas(32) float k[kChunk][kRowStride];
  alignas(32) float v[kChunk][kRowStride];
};

// The calling thread's chunk rows, for a block of queries (AttentionPartialQueriesAvx2).
ChunkRows& ThreadChunkRows() {
  static thread_local ChunkRows rows;
  return rows;
}

// The row offsets (KvLayerView::RowOffsets) of kv head kv_h's chunks [t0, t0 + kChunk) from
// t_begin on, up to t_end, in order. While the caller works through one chunk, it asks for the
// rows of the next one (PrefetchUpcoming); the first chunk's are asked for here.
class ChunkOffsets {
 public:
  ChunkOffsets(const KvLayerView& kv, int32_t kv_h, int32_t t_begin, int32_t t_end)
      : kv_(kv), kv_h_(kv_h), t_next_(t_begin), t_end_(t_end) {
    Fill(0);
    PrefetchKvRows(kv_, offsets_[0], count_[0]);
  }

  // The next chunk's offsets (min(kChunk, t_end - t0) of them); the chunk after it becomes the
  // upcoming one.
  const int64_t* Next() {
    const int current = upcoming_;
    upcoming_ ^= 1;
    Fill(upcoming_);
    return offsets_[current];
  }

  // Asks for the upcoming chunk's rows [c_begin, c_end), those it has. Always inlined: GCC
  // finds a function that only prefetches free of effects and drops the calls (it did here).
  [[gnu::always_inline]] void PrefetchUpcoming(int c_begin, int c_end) const {
    const int end = std::min(c_end, count_[upcoming_]);
    if (c_begin < end) PrefetchKvRows(kv_, offsets_[upcoming_] + c_begin, end - c_begin);
  }

 private:
  void Fill(int slot) {
    count_[slot] = std::max(0, std::min(kChunk, t_end_ - t_next_));
    kv_.RowOffsets(t_next_, count_[slot], kv_h_, offsets_[slot]);
    t_next_ += kChunk;
  }

  const KvLayerView& kv_;
  const int32_t kv_h_;
  int32_t t_next_;  // the first token of the chunk Fill fills
  const int32_t t_end_;
  int upcoming_ = 0;
  int count_[2] = {0, 0};
  int64_t offsets_[2][kChunk];
};

// Converts the K rows (and the V rows where `with_v`) at offsets[0..count).
void LoadChunk(const KvLayerView& kv, const int64_t* offsets, int count, bool with_v,
               ChunkRows* rows) {
  const int d_head = kv.head_dim;
  for (int c = 0; c < count; ++c) {
    for (int d = 0; d < d_head; d += 8) {
      _mm256_store_ps(&rows->k[c][d], LoadF16x8(kv.k_base + offsets[c] + d));
      if (with_v) _mm256_store_ps(&rows->v[c][d], LoadF16x8(kv.v_base + offsets[c] + d));
    }
  }
  for (int c = count; c < (count + 7) / 8 * 8; ++c) {
    for (int d = 0; d < d_head; d += 8) _mm256_store_ps(&rows->k[c][d], _mm256_setzero_ps());
  }
}

// Where a chunk step reads K: Scores<G> writes p[g][c] = scale * (q_g . K_c) for the G heads
// q [G, d_head] and keys c < count8 (a multiple of 8; past the chunk's keys the scores are
// overwritten), by KeyScores. ConvertedK: the chunk's f32 copy, converted once for the several
// queries that share it. CacheK: the cache itself, each vector converted as it is read, once
// for the G heads. The same values, so the same bits.
struct ConvertedK {
  const ChunkRows* rows;

  __m256 K(int c, int d) const { return _mm256_load_ps(&rows->k[c][d]); }

  template <int G>
  void Scores(const float* q, int d_head, int count8, __m256 scale, float (*p)[kChunk]) const {
    KeyScores<G>(q, d_head, *this, count8, scale, p, [](int) {});
  }
};

struct CacheK {
  const uint16_t* k[kChunk];  // past the chunk's keys: its first row, read and not used
  // Asked for the upcoming chunk's rows 8 at a time, between the passes over 8 keys, so that
  // the requests overlap the arithmetic instead of stalling it all at once.
  const ChunkOffsets* chunks;

  CacheK(const KvLayerView& kv, const int64_t* offsets, int count, const ChunkOffsets* chunks)
      : chunks(chunks) {
    for (int c = 0; c < count; ++c) k[c] = kv.k_base + offsets[c];
    for (int c = count; c < kChunk; ++c) k[c] = k[0];
  }

  __m256 K(int c, int d) const { return LoadF16x8(k[c] + d); }

  template <int G>
  void Scores(const float* q, int d_head, int count8, __m256 scale, float (*p)[kChunk]) const {
    // Always inlined, as PrefetchUpcoming is: a call that only prefetches can be dropped.
    KeyScores<G>(q, d_head, *this, count8, scale, p, [this](int c) __attribute__((always_inline)) {
      chunks->PrefetchUpcoming(c, c + 8);
    });
  }
};

// Where a chunk step reads V: 8 floats of key c's row from dimension d. ConvertedV: the chunk's
// f32 copy, converted once for the several queries that share it. CacheV: the cache itself, each
// vector converted as it is read (one query shares nothing). Both give the same values.
struct ConvertedV {
  const ChunkRows* rows;
  __m256 V(int c, int d) const { return _mm256_load_ps(&rows->v[c][d]); }
};

struct CacheV {
  const uint16_t* v[kChunk];
  CacheV(const KvLayerView& kv, const int64_t* offsets, int count) {
    for (int c = 0; c < count; ++c) v[c] = kv.v_base + offsets[c];
  }
  __m256 V(int c, int d) const { return LoadF16x8(v[c] + d); }
};

// The online-softmax step of G query heads q [G, d_head] with state [G, AttentionPartialSize]
// (m, l, acc as in a partial, isa_kernels.h) over a chunk whose first `count` keys are theirs:
// scores, then the new max, the rescale factor, the probabilities and their sum, then
// acc = acc * corr + sum_c p[c] * V[c]. Each head's arithmetic is the same for any G.
template <int G, class KRows, class VRows>
void ChunkStep(const float* q, int d_head, const KRows& krows, const VRows& vrows, int count,
               float scale, float* state) {
  // Accumulators per pass over the head dimension: enough independent FMA chains to hide their
  // latency (8 or more where they fit), few enough to stay in 16 registers with G broadcasts
  // and a V vector.
  constexpr int kPass = G <= 3 ? 4 : G == 4 ? 2 : 1;
  const int64_t size = AttentionPartialSize(d_head);
  const int count8 = (count + 7) / 8 * 8;
  const __m256 scale_v = _mm256_set1_ps(scale);
  alignas(32) float p[G][kChunk];
  float corr[G];
  krows.template Scores<G>(q, d_head, count8, scale_v, p);
#pragma GCC unroll 8
  for (int g = 0; g < G; ++g) {
    float* st = state + g * size;
    for (int c = count; c < kChunk; ++c) p[g][c] = -INFINITY;
    __m256 mx = _mm256_load_ps(&p[g][0]);
    for (int c = 8; c < kChunk; c += 8) mx = _mm256_max_ps(mx, _mm256_load_ps(&p[g][c]));
    const float m_new = std::fmax(st[0], HorizontalMax(mx));
    corr[g] = Exp1(st[0] - m_new);
    const __m256 mv = _mm256_set1_ps(m_new);
    __m256 sum = _mm256_setzero_ps();
    for (int c = 0; c < kChunk; c += 8) {
      const __m256 e = Exp256(_mm256_sub_ps(_mm256_load_ps(&p[g][c]), mv));
      _mm256_store_ps(&p[g][c], e);
      sum = _mm256_add_ps(sum, e);
    }
    st[1] = st[1] * corr[g] + HorizontalSum(sum);
    st[0] = m_new;
  }
  int d = 0;
  for (; d + 8 * kPass <= d_head; d += 8 * kPass) {
    __m256 a[G][kPass];
#pragma GCC unroll 8
    for (int g = 0; g < G; ++g) {
      const __m256 cg = _mm256_set1_ps(corr[g]);
#pragma GCC unroll 4
      for (int j = 0; j < kPass; ++j) {
        a[g][j] = _mm256_mul_ps(_mm256_loadu_ps(state + g * size + 2 + d + 8 * j), cg);
      }
    }
    for (int c = 0; c < count; ++c) {
#pragma GCC unroll 4
      for (int j = 0; j < kPass; ++j) {
        const __m256 v8 = vrows.V(c, d + 8 * j);
#pragma GCC unroll 8
        for (int g = 0; g < G; ++g) {
          a[g][j] = _mm256_fmadd_ps(_mm256_broadcast_ss(&p[g][c]), v8, a[g][j]);
        }
      }
    }
#pragma GCC unroll 8
    for (int g = 0; g < G; ++g) {
#pragma GCC unroll 4
      for (int j = 0; j < kPass; ++j) _mm256_storeu_ps(state + g * size + 2 + d + 8 * j, a[g][j]);
    }
  }
  for (; d < d_head; d += 8) {
    __m256 a[G];
#pragma GCC unroll 8
    for (int g = 0; g < G; ++g) {
      a[g] = _mm256_mul_ps(_mm256_loadu_ps(state + g * size + 2 + d), _mm256_set1_ps(corr[g]));
    }
    for (int c = 0; c < count; ++c) {
      const __m256 v8 = vrows.V(c, d);
#pragma GCC unroll 8
      for (int g = 0; g < G; ++g) a[g] = _mm256_fmadd_ps(_mm256_broadcast_ss(&p[g][c]), v8, a[g]);
    }
#pragma GCC unroll 8
    for (int g = 0; g < G; ++g) _mm256_storeu_ps(state + g * size + 2 + d, a[g]);
  }
}

// One query's `group` heads, q [group, d_head] and state [group, AttentionPartialSize], through
// a chunk, kMaxGroup at a time.
template <class KRows, class VRows>
void GroupStep(const float* q, int32_t group, int d_head, const KRows& krows,
               const VRows& vrows, int count, float scale, float* state) {
  const int64_t size = AttentionPartialSize(d_head);
  for (int32_t g0 = 0; g0 < group; g0 += kMaxGroup) {
    const float* qg = q + static_cast<int64_t>(g0) * d_head;
    float* sg = state + g0 * size;
    switch (std::min(group - g0, kMaxGroup)) {
      case 1: ChunkStep<1>(qg, d_head, krows, vrows, count, scale, sg); break;
      case 2: ChunkStep<2>(qg, d_head, krows, vrows, count, scale, sg); break;
      case 3: ChunkStep<3>(qg, d_head, krows, vrows, count, scale, sg); break;
      case 4: ChunkStep<4>(qg, d_head, krows, vrows, count, scale, sg); break;
      case 5: ChunkStep<5>(qg, d_head, krows, vrows, count, scale, sg); break;
      case 6: ChunkStep<6>(qg, d_head, krows, vrows, count, scale, sg); break;
      case 7: ChunkStep<7>(qg, d_head, krows, vrows, count, scale, sg); break;
      default: ChunkStep<8>(qg, d_head, krows, vrows, count, scale, sg); break;
    }
  }
}

void AttentionPartialAvx2(const float* q, int32_t kv_h, int32_t group, int32_t t_begin,
                          int32_t t_end, const KvLayerView& kv, float scale, float* partial) {
  AttentionInitState(group, kv.head_dim, partial);
  ChunkOffsets chunks(kv, kv_h, t_begin, t_end);
  for (int32_t t0 = t_begin; t0 < t_end; t0 += kChunk) {
    const int count = std::min(kChunk, t_end - t0);
    const int64_t* offsets = chunks.Next();
    GroupStep(q, group, kv.head_dim, CacheK(kv, offsets, count, &chunks),
              CacheV(kv, offsets, count), count, scale, partial);
  }
}

// Several queries: each chunk's K and V rows are converted once for all of them.
void AttentionPartialQueriesAvx2(const float* q, int64_t q_stride, int32_t n_q,
                                 const int32_t* t_end, int32_t kv_h, int32_t group,
                                 int32_t t_begin, const KvLayerView& kv, float scale,
                                 float* partial, int64_t partial_stride) {
  if (n_q == 1) {
    if (t_end[0] > t_begin) {
      AttentionPartialAvx2(q, kv_h, group, t_begin, t_end[0], kv, scale, partial);
    }
    return;
  }
  ChunkRows& rows = ThreadChunkRows();
  int32_t last = t_begin;
  for (int32_t j = 0; j < n_q; ++j) {
    if (t_end[j] <= t_begin) continue;
    last = std::max(last, t_end[j]);
    AttentionInitState(group, kv.head_dim, partial + j * partial_stride);
  }
  ChunkOffsets chunks(kv, kv_h, t_begin, last);
  for (int32_t t0 = t_begin; t0 < last; t0 += kChunk) {
    const int64_t* offsets = chunks.Next();
    chunks.PrefetchUpcoming(0, kChunk);
    LoadChunk(kv, offsets, std::min(kChunk, last - t0), /*with_v=*/true, &rows);
    for (int32_t j = 0; j < n_q; ++j) {
      if (t_end[j] <= t0) continue;
      GroupStep(q + j * q_stride, group, kv.head_dim, ConvertedK{&rows}, ConvertedV{&rows},
                std::min(kChunk, t_end[j] - t0), scale, partial + j * partial_stride);
    }
  }
}

void AttentionFoldAvx2(const float* partial, int32_t group, int32_t head_dim, float* state) {
  const int64_t size = AttentionPartialSize(head_dim);
  for (int32_t g = 0; g < group; ++g) {
    const float* p = partial + g * size;
    float* s = state + g * size;
    const float m_new = std::fmax(s[0], p[0]);
    const float a = Exp1(s[0] - m_new);
    const float b = Exp1(p[0] - m_new);
    s[0] = m_new;
    s[1] = s[1] * a + p[1] * b;
    const __m256 av = _mm256_set1_ps(a), bv = _mm256_set1_ps(b);
    for (int d = 0; d < head_dim; d += 8) {
      const __m256 acc = _mm256_mul_ps(_mm256_loadu_ps(s + 2 + d), av);
      _mm256_storeu_ps(s + 2 + d, _mm256_fmadd_ps(_mm256_loadu_ps(p + 2 + d), bv, acc));
    }
  }
}

void AttentionFinishAvx2(const float* state, int32_t group, int32_t head_dim, float* out) {
  const int64_t size = AttentionPartialSize(head_dim);
  for (int32_t g = 0; g < group; ++g) {
    const float* s = state + g * size;
    const __m256 lv = _mm256_set1_ps(s[1]);
    for (int d = 0; d < head_dim; d += 8) {
      _mm256_storeu_ps(out + g * head_dim + d, _mm256_div_ps(_mm256_loadu_ps(s + 2 + d), lv));
    }
  }
}

// silu(g) * u = g / (1 + exp(-g)) * u on 8 lanes.
inline __m256 SiluMul8(__m256 g, __m256 u) {
  const __m256 e = Exp256(_mm256_sub_ps(_mm256_setzero_ps(), g));
  return _mm256_mul_ps(_mm256_div_ps(g, _mm256_add_ps(_mm256_set1_ps(1.0f), e)), u);
}

void SiluMulAvx2(const float* gate, const float* up, int64_t count, float* y) {
  int64_t i = 0;
  for (; i + 8 <= count; i += 8) {
    _mm256_storeu_ps(y + i, SiluMul8(_mm256_loadu_ps(gate + i), _mm256_loadu_ps(up + i)));
  }
  if (i < count) {  // the tail through the same lanes, so every element gets the same arithmetic
    alignas(32) float g[8] = {}, u[8] = {}, r[8];
    std::memcpy(g, gate + i, (count - i) * sizeof(float));
    std::memcpy(u, up + i, (count - i) * sizeof(float));
    _mm256_store_ps(r, SiluMul8(_mm256_load_ps(g), _mm256_load_ps(u)));
    std::memcpy(y + i, r, (count - i) * sizeof(float));
  }
}

}  // namespace

void FillAvx2AttentionKernels(IsaKernels* k) {
  k->attention_partial = AttentionPartialAvx2;
  k->attention_partial_queries = AttentionPartialQueriesAvx2;
  k->attention_fold = AttentionFoldAvx2;
  k->attention_finish = AttentionFinishAvx2;
  k->silu_mul = SiluMulAvx2;
  k->rope_rotate = RotateHeads;
}

}  // namespace baton::kernels

#if defined(__clang__)
#pragma clang attribute pop
#endif
