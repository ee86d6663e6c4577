// One warp's share of the quantized tensor-core product (quantized_matmul.cuh): y [n, n_rows] =
// x [n, n_cols] · Wᵀ, W split (split_geometry.h), x quantized to 8 bits per 32 values. Plain
// C++ called by the kernel and by the CPU tests, which run 32 lanes of it in lockstep around an
// emulated tensor-core instruction: everything but the instruction itself and the grid is
// checked without a GPU.
//
// The instruction is mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32: A [16 x 32] int8 (16
// weight rows, one 32-value group) times B [32 x 8] int8 (the group's activations of 8 tokens)
// into C [16 x 8] int32. Lane l (g = l / 4, t = l % 4) holds, as the PTX ISA's "matrix
// fragments for mma.m16n8k32" say:
//   A: a0 = row g, values 4t..4t+3; a1 = row g + 8, the same; a2, a3 = rows g, g + 8, values
//      16 + 4t..16 + 4t + 3 (four int8 per register, the lowest value in the lowest byte);
//   B: b0 = token g, values 4t..4t+3; b1 = token g, values 16 + 4t..;
//   C: c0, c1 = row g, tokens 2t, 2t + 1; c2, c3 = row g + 8, tokens 2t, 2t + 1.
//
// A weight type multiplies this way when each 32-value group of a row is affine in int8 values:
// w_j = scale * q_j + offset (Q4_0: q in [0, 16), offset -8 scale; Q4_1, Q4_K: a minimum;
// Q8_0: no offset). With x_j ~= d * p_j (p int8, d_sum = d * sum p), a group's dot is
//   scale * d * (sum q_j p_j) + offset * d_sum,
// the sum in the instruction's integers, once per group. Q6_K (a scale per 16 values) does not
// fit a 32-value group and keeps the f16 GEMM.
//
// Thread-safety: pure functions and per-lane values.
#ifndef BATON_KERNELS_CUDA_MMA_WARP_TILE_H_
#define BATON_KERNELS_CUDA_MMA_WARP_TILE_H_

#include <cstdint>

#include "kernels/cuda/lane_primitives.h"
#include "kernels/dtype.h"
#include "kernels/host_device.h"

namespace baton::kernels::cuda {

// w_j = scale * q_j + offset over one 32-value group.
struct GroupAffine {
  float scale = 0.0f;
  float offset = 0.0f;
};

// Per weight type: kGroupsPerBlock 32-value groups per block; Quad(bits, group, quad) = the int8
// q of values 4 quad..4 quad + 3 of the group (quad in [0, 8)) from the block's split bits;
// Affine(header, group) from its split header.
struct MmaGroupsQ4_0 {  // bits qs[16]: value j < 16 low nibble of qs[j], j >= 16 high of qs[j-16]
  static constexpr DType kType = DType::kQ4_0;
  static constexpr int kGroupsPerBlock = 1;
  BATON_HOST_DEVICE static uint32_t Quad(const uint8_t* bits, int /*group*/, int quad) {
    return (LoadWord(bits + 4 * (quad % 4)) >> (4 * (quad / 4))) & 0x0f0f0f0fu;
  }
  BATON_HOST_DEVICE static GroupAffine Affine(const uint8_t* header, int /*group*/) {
    const float d = LoadHalf(header);
    return {d, -8.0f * d};
  }
};

struct MmaGroupsQ4_1 {  // bits as Q4_0; header f16 d, m
  static constexpr DType kType = DType::kQ4_1;
  static constexpr int kGroupsPerBlock = 1;
  BATON_HOST_DEVICE static uint32_t Quad(const uint8_t* bits, int group, int quad) {
    return MmaGroupsQ4_0::Quad(bits, group, quad);
  }
  BATON_HOST_DEVICE static GroupAffine Affine(const uint8_t* header, int /*group*/) {
    return {LoadHalf(header), LoadHalf(header + 2)};
  }
};

struct MmaGroupsQ8_0 {  // bits i8 qs[32]; header f16 d
  static constexpr DType kType = DType::kQ8_0;
  static constexpr int kGroupsPerBlock = 1;
  BATON_HOST_DEVICE static uint32_t Quad(const uint8_t* bits, int /*group*/, int quad) {
    return LoadWord(bits + 4 * quad);
  }
  BATON_HOST_DEVICE static GroupAffine Affine(const uint8_t* header, int /*group*/) {
    return {LoadHalf(header), 0.0f};
  }
};

// Q4_K: bits qs[128], group s takes the low (s even) or high (s odd) nibbles of
// qs[32 (s / 2) + l]; header f16 d, dmin, scales[12] (a 6-bit scale and minimum per group).
struct MmaGroupsQ4_K {
  static constexpr DType kType = DType::kQ4_K;
  static constexpr int kGroupsPerBlock = 8;
  BATON_HOST_DEVICE static uint32_t Quad(const uint8_t* bits, int group, int quad) {
    return (LoadWord(bits + 32 * (group / 2) + 4 * quad) >> (4 * (group % 2))) & 0x0f0f0f0fu;
  }
  BATON_HOST_DEVICE static GroupAffine Affine(const uint8_t* header, int group) {
    int scale, min;
    ScaleMinK4(header + 4, group, &scale, &min);
    return {LoadHalf(header) * static_cast<float>(scale),
            -LoadHalf(header + 2) * static_cast<float>(min)};
  }
};

// The product's operands: W split, x quantized (Q8Rows' layout: q [n, n_cols] int8, and per 32
// values of a row the pair (d, d_sum) in ds [n, n_cols / 32, 2]).
struct MmaProblem {
  const uint8_t* bits = nullptr;
  const uint8_t* headers = nullptr;
  int64_t n_rows = 0;
  int64_t n_cols = 0;  // a multiple of the type's block
  int bits_bytes = 0;  // per block
  int header_bytes = 0;
  int block_values = 0;
  const int8_t* q = nullptr;
  const float* ds = nullptr;
  int64_t n = 0;  // tokens
};

// What a lane brings to one group's instructions: A per m-tile, B per n-tile, and the scales of
// the C elements it will hold.
template <int kTilesM, int kTilesN>
struct MmaOperands {
  uint32_t a[kTilesM][4];
  uint32_t b[kTilesN][2];
  GroupAffine w[kTilesM][2];  // rows g, g + 8 of each m-tile
  float x_d[kTilesN][2];      // tokens 2t, 2t + 1 of each n-tile
  float x_sum[kTilesN][2];
};

// A lane's part of a warp's tile: weight rows [first_row, first_row + 16 kTilesM) times tokens
// [first_token, first_token + 8 kTilesN). Rows and tokens past the ends are read as the last one
// (valid memory) and never stored.
template <typename Groups, int kTilesM, int kTilesN>
class MmaWarpTile {
 public:
  using Operands = MmaOperands<kTilesM, kTilesN>;

  BATON_HOST_DEVICE MmaWarpTile(const MmaProblem& p, int64_t first_row, int64_t first_token,
                                int lane)
      : p_(p), first_row_(first_row), first_token_(first_token), g_(lane / 4), t_(lane % 4) {
    BATON_UNROLL
    for (int m = 0; m < kTilesM; ++m) {
      BATON_UNROLL
      for (int n = 0; n < kTilesN; ++n) {
        BATON_UNROLL
        for (int i = 0; i < 4; ++i) acc_[m][n][i] = 0.0f;
      }
    }
  }

  // Groups of 32 values in a row.
  BATON_HOST_DEVICE int64_t groups() const { return p_.n_cols / 32; }

  // The lane's operands for group k of the rows.
  BATON_HOST_DEVICE void Load(int64_t k, Operands* ops) const {
    const int64_t block = k / Groups::kGroupsPerBlock;
    const int group = static_cast<int>(k % Groups::kGroupsPerBlock);
    const int64_t blocks_row = p_.n_cols / p_.block_values;
    BATON_UNROLL
    for (int m = 0; m < kTilesM; ++m) {
      BATON_UNROLL
      for (int half = 0; half < 2; ++half) {
        const int64_t b = Row(first_row_ + 16 * m + g_ + 8 * half) * blocks_row + block;
        const uint8_t* bits = p_.bits + b * p_.bits_bytes;
        ops->a[m][half] = Groups::Quad(bits, group, t_);
        ops->a[m][2 + half] = Groups::Quad(bits, group, 4 + t_);
        ops->w[m][half] = Groups::Affine(p_.headers + b * p_.header_bytes, group);
      }
    }
    const int64_t groups_row = groups();
    BATON_UNROLL
    for (int n = 0; n < kTilesN; ++n) {
      const int8_t* x = p_.q + Token(first_token_ + 8 * n + g_) * p_.n_cols + 32 * k;
      ops->b[n][0] = LoadWord(x + 4 * t_);
      ops->b[n][1] = LoadWord(x + 16 + 4 * t_);
      BATON_UNROLL
      for (int j = 0; j < 2; ++j) {
        const float* ds = p_.ds + 2 * (Token(first_token_ + 8 * n + 2 * t_ + j) * groups_row + k);
        ops->x_d[n][j] = ds[0];
        ops->x_sum[n][j] = ds[1];
      }
    }
  }

  // acc += tile (m, n)'s C elements of the group, scaled.
  BATON_HOST_DEVICE void Accumulate(const Operands& ops, int m, int n, const int32_t c[4]) {
    BATON_UNROLL
    for (int i = 0; i < 4; ++i) {
      const GroupAffine& w = ops.w[m][i / 2];
      acc_[m][n][i] += w.scale * ops.x_d[n][i % 2] * static_cast<float>(c[i]) +
                       w.offset * ops.x_sum[n][i % 2];
    }
  }

  // y [n, n_rows]: the lane's elements within the ends.
  BATON_HOST_DEVICE void Store(float* y) const {
    BATON_UNROLL
    for (int m = 0; m < kTilesM; ++m) {
      BATON_UNROLL
      for (int n = 0; n < kTilesN; ++n) {
        BATON_UNROLL
        for (int i = 0; i < 4; ++i) {
          const int64_t row = first_row_ + 16 * m + g_ + 8 * (i / 2);
          const int64_t token = first_token_ + 8 * n + 2 * t_ + i % 2;
          if (row < p_.n_rows && token < p_.n) y[token * p_.n_rows + row] = acc_[m][n][i];
        }
      }
    }
  }

 private:
  BATON_HOST_DEVICE int64_t Row(int64_t r) const { return r < p_.n_rows ? r : p_.n_rows - 1; }
  BATON_HOST_DEVICE int64_t Token(int64_t i) const { return i < p_.n ? i : p_.n - 1; }

  MmaProblem p_;
  int64_t first_row_, first_token_;
  int g_, t_;
  float acc_[kTilesM][kTilesN][4];
};

}  // namespace baton::kernels::cuda

#endif  // BATON_KERNELS_CUDA_MMA_WARP_TILE_H_
