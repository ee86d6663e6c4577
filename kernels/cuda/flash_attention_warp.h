// One warp's share of the tensor-core prefill attention (flash_attention.cuh), FlashAttention-2
// style: 16 queries of one head against the sequence's paged keys, kKeyTiles x 8 keys a step,
// S = Q Kᵀ and O += P V on f16 mma tiles with f32 accumulation, softmax online. Plain C++
// called by the kernel and by the CPU tests, which run 32 lanes of it in lockstep around an
// emulated instruction and emulated shuffles: everything but those and the grid is checked
// without a GPU.
//
// The instruction is mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32: A [16 x 16] f16 times
// B [16 x 8] f16 plus C [16 x 8] f32. Lane l (g = l / 4, t = l % 4) holds, as the PTX ISA's
// "matrix fragments for mma.m16n8k16" say (two f16 per register, the lower column in the
// lower half):
//   A: a0 = row g, columns 2t, 2t + 1; a1 = row g + 8, the same; a2, a3 = rows g, g + 8,
//      columns 8 + 2t, 8 + 2t + 1;
//   B: b0 = rows (k) 2t, 2t + 1 of column g; b1 = rows 8 + 2t, 8 + 2t + 1;
//   C: c0, c1 = row g, columns 2t, 2t + 1; c2, c3 = row g + 8, the same.
// So S's C fragments of two 8-key tiles are, converted to f16, P's A fragment of one 16-key
// step: no data leaves the lane between the two products.
//
// A step, per lane: KeyFragment (B of S for each key tile and 16 dims), the instruction,
// Score (scale, mask, the lane's row maxima), the maxima across the lane's quad (the 4 lanes
// of a row: shuffles), Absorb (P, the rescaled O and sums), ValueFragment (B of P V), the
// instruction. At the end the quad's sums, then Store.
//
// Thread-safety: per-lane values.
#ifndef BATON_KERNELS_CUDA_FLASH_ATTENTION_WARP_H_
#define BATON_KERNELS_CUDA_FLASH_ATTENTION_WARP_H_

#include <cmath>
#include <cstdint>

#include "kernels/cuda/attention_batch.h"
#include "kernels/cuda/lane_primitives.h"
#include "kernels/host_device.h"
#include "kernels/kv_block_layout.h"

namespace baton::kernels::cuda {

// What every warp of a launch shares: one sequence's cache and queries.
struct FlashProblem {
  const float* q = nullptr;  // the sequence's [n_q, n_head, head_dim]
  float* out = nullptr;      // the same shape
  const uint16_t* k_base = nullptr;
  const uint16_t* v_base = nullptr;
  const int32_t* table = nullptr;  // the sequence's block table
  KvLayout layout{};
  int32_t n_head = 0;
  float scale = 1.0f;
  const float* sinks = nullptr;  // null or [n_head]
};

// A lane's part of 16 queries (up to 16 entries of `queries`, one sequence) of head h, with
// kHeadDim dims (a multiple of 16, up to 256) and kKeyTiles x 8 keys a step (kKeyTiles even).
template <int kHeadDim, int kKeyTiles>
class FlashWarpTile {
 public:
  static_assert(kHeadDim % 16 == 0 && kKeyTiles % 2 == 0, "whole mma tiles");
  static constexpr int kDimSteps = kHeadDim / 16;  // k-steps of S, and 16-dim halves
  static constexpr int kDimTiles = kHeadDim / 8;   // n-tiles of O
  static constexpr int kKeys = 8 * kKeyTiles;      // keys a step
  static constexpr int kKeySteps = kKeyTiles / 2;  // k-steps of P V

  BATON_HOST_DEVICE FlashWarpTile(const FlashProblem& p, const AttentionQuery* queries,
                                  int count, int h, int lane)
      : p_(p), h_(h), kv_h_(h / (p.n_head / p.layout.n_kv_head)), g_(lane / 4), t_(lane % 4) {
    BATON_UNROLL
    for (int r = 0; r < 2; ++r) {
      const int i = g_ + 8 * r;
      const bool valid = i < count;
      const AttentionQuery query = queries[valid ? i : count - 1];
      row_[r] = valid ? query.row : -1;
      position_[r] = valid ? query.position : -1;
      first_visible_[r] = FirstVisibleToken(p.layout.window, query.position);
      m_[r] = -INFINITY;
      l_[r] = 0.0f;
      const float* q = p.q + (static_cast<int64_t>(query.row) * p.n_head + h) * kHeadDim;
      BATON_UNROLL
      for (int ks = 0; ks < kDimSteps; ++ks) {
        qa_[ks][r] = PackHalves(q[16 * ks + 2 * t_], q[16 * ks + 2 * t_ + 1]);
        qa_[ks][2 + r] = PackHalves(q[16 * ks + 8 + 2 * t_], q[16 * ks + 8 + 2 * t_ + 1]);
      }
    }
    BATON_UNROLL
    for (int d = 0; d < kDimTiles; ++d) {
      BATON_UNROLL
      for (int i = 0; i < 4; ++i) o_[d][i] = 0.0f;
    }
    int32_t lowest = queries[0].position;
    for (int i = 0; i < count; ++i) {
      lowest = lowest < queries[i].position ? lowest : queries[i].position;
      warp_last_ = warp_last_ > queries[i].position ? warp_last_ : queries[i].position;
    }
    window_first_ = FirstVisibleToken(p.layout.window, lowest);
  }

  // Q's A fragment for dims [16 ks, 16 ks + 16).
  BATON_HOST_DEVICE const uint32_t* QueryFragment(int ks) const { return qa_[ks]; }

  // K's B fragment of key tile j of the step from first_key, dims [16 ks, 16 ks + 16): key
  // first_key + 8 j + g. A key no query of the warp may see reads as 0.
  BATON_HOST_DEVICE void KeyFragment(int32_t first_key, int j, int ks, uint32_t b[2]) const {
    const int32_t key = first_key + 8 * j + g_;
    if (!Readable(key)) {
      b[0] = b[1] = 0;
      return;
    }
    const uint16_t* k = p_.k_base + RowOffset(key) + 16 * ks + 2 * t_;
    b[0] = HalfPair(LoadHalfBits(k), LoadHalfBits(k + 1));
    b[1] = HalfPair(LoadHalfBits(k + 8), LoadHalfBits(k + 9));
  }

  // s [kKeyTiles][4]: the step's raw scores (C fragments), scaled and masked in place (keys a
  // row may not see: -inf); max[r]: the lane's maximum of row g + 8 r.
  BATON_HOST_DEVICE void Score(int32_t first_key, float s[][4], float max[2]) const {
    max[0] = max[1] = -INFINITY;
    BATON_UNROLL
    for (int j = 0; j < kKeyTiles; ++j) {
      BATON_UNROLL
      for (int i = 0; i < 4; ++i) {
        const int r = i / 2;
        const int32_t key = first_key + 8 * j + 2 * t_ + i % 2;
        const bool visible = key <= position_[r] && key >= first_visible_[r];
        s[j][i] = visible ? s[j][i] * p_.scale : -INFINITY;
        max[r] = fmaxf(max[r], s[j][i]);
      }
    }
  }

  // With the rows' maxima over the quad: P's A fragments pa [kKeySteps][4] (f16), O and the
  // lane's sums rescaled to the new maxima.
  BATON_HOST_DEVICE void Absorb(const float s[][4], const float row_max[2],
                                uint32_t pa[][4]) {
    float correction[2];
    BATON_UNROLL
    for (int r = 0; r < 2; ++r) {
      const float m_new = fmaxf(m_[r], row_max[r]);
      // A row that has seen nothing yet keeps m = -inf: nothing to rescale, every p 0.
      correction[r] = m_new == -INFINITY ? 1.0f : ExpOf(m_[r] - m_new);
      m_[r] = m_new;
      l_[r] *= correction[r];
    }
    float p[kKeyTiles][4];
    BATON_UNROLL
    for (int j = 0; j < kKeyTiles; ++j) {
      BATON_UNROLL
      for (int i = 0; i < 4; ++i) {
        const int r = i / 2;
        p[j][i] = s[j][i] == -INFINITY ? 0.0f : ExpOf(s[j][i] - m_[r]);
        l_[r] += p[j][i];
      }
    }
    BATON_UNROLL
    for (int d = 0; d < kDimTiles; ++d) {
      BATON_UNROLL
      for (int i = 0; i < 4; ++i) o_[d][i] *= correction[i / 2];
    }
    BATON_UNROLL
    for (int kk = 0; kk < kKeySteps; ++kk) {
      pa[kk][0] = PackHalves(p[2 * kk][0], p[2 * kk][1]);
      pa[kk][1] = PackHalves(p[2 * kk][2], p[2 * kk][3]);
      pa[kk][2] = PackHalves(p[2 * kk + 1][0], p[2 * kk + 1][1]);
      pa[kk][3] = PackHalves(p[2 * kk + 1][2], p[2 * kk + 1][3]);
    }
  }

  // V's B fragment of keys [first_key + 16 kk, + 16) and dims [8 d, 8 d + 8): keys
  // 16 kk + 2t, + 1 (and + 8) of dim 8 d + g. A key no query may see reads as 0.
  BATON_HOST_DEVICE void ValueFragment(int32_t first_key, int kk, int d, uint32_t b[2]) const {
    const int32_t key = first_key + 16 * kk + 2 * t_;
    const int dim = 8 * d + g_;
    b[0] = HalfPair(ValueBits(key, dim), ValueBits(key + 1, dim));
    b[1] = HalfPair(ValueBits(key + 8, dim), ValueBits(key + 9, dim));
  }

  // O's C fragment for dims [8 d, 8 d + 8): the instruction adds P V into it.
  BATON_HOST_DEVICE float* Output(int d) { return o_[d]; }

  // The lane's sums of rows g, g + 8 (the quad's are their total).
  BATON_HOST_DEVICE float Sum(int r) const { return l_[r]; }

  // out = O / (the quad's sum, with the head's sink), for the lane's valid rows.
  BATON_HOST_DEVICE void Store(const float row_sum[2]) const {
    BATON_UNROLL
    for (int r = 0; r < 2; ++r) {
      if (row_[r] < 0) continue;
      float m = m_[r], l = row_sum[r], correction = 1.0f;
      if (p_.sinks != nullptr) {  // the head's sink joins the denominator
        const float sink = p_.sinks[h_];
        const float m_new = fmaxf(m, sink);
        correction = ExpOf(m - m_new);
        l = l * correction + ExpOf(sink - m_new);
      }
      float* out = p_.out + (static_cast<int64_t>(row_[r]) * p_.n_head + h_) * kHeadDim;
      BATON_UNROLL
      for (int d = 0; d < kDimTiles; ++d) {
        out[8 * d + 2 * t_] = o_[d][2 * r] * correction / l;
        out[8 * d + 2 * t_ + 1] = o_[d][2 * r + 1] * correction / l;
      }
    }
  }

  // The steps cover the keys the warp's queries see: from the first its lowest position sees
  // (rounded down to a step) to its highest position.
  BATON_HOST_DEVICE int32_t FirstKey() const { return window_first_ / kKeys * kKeys; }
  BATON_HOST_DEVICE int32_t LastKey() const { return warp_last_; }

 private:
  // A key some query of the warp may see: in the cache (every key up to the warp's highest
  // position is; a windowed layer may have freed the blocks before its lowest query's window).
  // Other keys are not read.
  BATON_HOST_DEVICE bool Readable(int32_t key) const {
    return key >= window_first_ && key <= warp_last_;
  }
  BATON_HOST_DEVICE int64_t RowOffset(int32_t key) const {
    return static_cast<int64_t>(p_.table[key / p_.layout.block_size]) * p_.layout.block_stride +
           KvRowInBlock(key % p_.layout.block_size, kv_h_, p_.layout.block_size, kHeadDim);
  }
  BATON_HOST_DEVICE uint16_t ValueBits(int32_t key, int dim) const {
    return Readable(key) ? LoadHalfBits(p_.v_base + RowOffset(key) + dim) : 0;  // 0: +0.0
  }
  BATON_HOST_DEVICE static uint32_t HalfPair(uint16_t low, uint16_t high) {
    return static_cast<uint32_t>(low) | (static_cast<uint32_t>(high) << 16);
  }

  FlashProblem p_;
  int h_, kv_h_, g_, t_;
  int32_t row_[2], position_[2], first_visible_[2];
  int32_t window_first_ = 0, warp_last_ = -1;
  float m_[2], l_[2];
  uint32_t qa_[kDimSteps][4];
  float o_[kDimTiles][4];
};

}  // namespace baton::kernels::cuda

#endif  // BATON_KERNELS_CUDA_FLASH_ATTENTION_WARP_H_
