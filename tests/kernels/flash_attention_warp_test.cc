// The tensor-core prefill attention's warp tiles (kernels/cuda/flash_attention_warp.h) without a
// GPU: 32 lanes step in lockstep through the keys, with the f16 tensor-core instruction and the
// quads' shuffles emulated between their calls (the instruction from the PTX ISA's fragment
// tables, written out here apart from the code under test). Each tile's output must be causal
// attention over the paged cache as a double-precision reference computes it from the same f16
// keys and values: for head sizes 64, 128 and 256, two key steps, grouped-query heads, tiles
// that start at the sequence's start or inside it, partial tiles, a sliding window whose early
// blocks are gone, and sinks.
#include "kernels/cuda/flash_attention_warp.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/half.h"

namespace baton::kernels::cuda {
namespace {

float Low(uint32_t r) { return F16ToF32(static_cast<uint16_t>(r & 0xffff)); }
float High(uint32_t r) { return F16ToF32(static_cast<uint16_t>(r >> 16)); }
float HalfOf(uint32_t r, int k) { return k == 0 ? Low(r) : High(r); }

// mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 over a warp, c += a b. The PTX ISA's
// tables for lane l (g = l / 4, t = l % 4): A element i (of 8 halves over 4 registers) is row
// g + 8 ((i / 2) % 2), column 2t + i % 2 + 8 (i / 4); B element i (4 halves over 2 registers)
// is row 2t + i % 2 + 8 (i / 2), column g; C element i is row g + 8 (i / 2), column
// 2t + i % 2.
void EmulateMma(const uint32_t a[32][4], const uint32_t b[32][2], float* c[32]) {
  double am[16][16] = {}, bm[16][8] = {};
  for (int l = 0; l < 32; ++l) {
    const int g = l / 4, t = l % 4;
    for (int i = 0; i < 8; ++i) {
      am[g + 8 * ((i / 2) % 2)][2 * t + i % 2 + 8 * (i / 4)] = HalfOf(a[l][i / 2], i % 2);
    }
    for (int i = 0; i < 4; ++i) bm[2 * t + i % 2 + 8 * (i / 2)][g] = HalfOf(b[l][i / 2], i % 2);
  }
  for (int l = 0; l < 32; ++l) {
    const int g = l / 4, t = l % 4;
    for (int i = 0; i < 4; ++i) {
      double sum = 0.0;
      for (int k = 0; k < 16; ++k) sum += am[g + 8 * (i / 2)][k] * bm[k][2 * t + i % 2];
      c[l][i] += static_cast<float>(sum);
    }
  }
}

struct Setup {
  int32_t n_tokens = 45;
  int32_t window = 0;
  bool sinks = false;
  int32_t first_query = 0;  // position of the tile's first query
  int32_t count = 16;
};

template <int kHeadDim, int kKeyTiles>
class Scenario {
 public:
  using Tile = FlashWarpTile<kHeadDim, kKeyTiles>;
  static constexpr int32_t kBlockSize = 16, kKvHeads = 2, kHeads = 4;
  static constexpr int64_t kBlockStride = int64_t{kKvHeads} * kBlockSize * kHeadDim;

  explicit Scenario(const Setup& s) : s_(s) {
    std::mt19937 rng(11);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    const int32_t n_blocks = (s.n_tokens + kBlockSize - 1) / kBlockSize;
    table_.resize(n_blocks);
    std::iota(table_.begin(), table_.end(), 0);
    std::shuffle(table_.begin(), table_.end(), rng);
    // A canary value (NaN) everywhere no key lives: a read of a freed or missing key shows.
    k_.assign(n_blocks * kBlockStride, F32ToF16(NAN));
    v_.assign(n_blocks * kBlockStride, F32ToF16(NAN));
    const int32_t first_kept =
        s.window > 0 ? FirstVisibleBlock(s.window, s.first_query, kBlockSize) : 0;
    for (int32_t key = first_kept * kBlockSize; key < s.n_tokens; ++key) {
      for (int32_t kv_h = 0; kv_h < kKvHeads; ++kv_h) {
        for (int dim = 0; dim < kHeadDim; ++dim) {
          k_[Offset(key, kv_h) + dim] = F32ToF16(normal(rng));
          v_[Offset(key, kv_h) + dim] = F32ToF16(normal(rng));
        }
      }
    }
    q_.resize(static_cast<size_t>(s.count) * kHeads * kHeadDim);
    for (float& x : q_) x = normal(rng);
    sinks_ = {0.5f, -1.0f, 2.0f, 0.0f};
    for (int32_t i = 0; i < s.count; ++i) queries_.push_back({0, i, s.first_query + i});
    out_.assign(q_.size(), NAN);
    problem_ = {.q = q_.data(), .out = out_.data(), .k_base = k_.data(), .v_base = v_.data(),
                .table = table_.data(),
                .layout = {.block_stride = kBlockStride, .block_size = kBlockSize,
                           .n_kv_head = kKvHeads, .head_dim = kHeadDim, .window = s.window},
                .n_head = kHeads, .scale = 1.0f / std::sqrt(static_cast<float>(kHeadDim)),
                .sinks = s.sinks ? sinks_.data() : nullptr};
  }

  // Every head's tile, run as 32 lanes; max |out - reference| / rms(reference).
  double Error() {
    for (int h = 0; h < kHeads; ++h) RunHead(h);
    double max_error = 0.0, squares = 0.0;
    for (int32_t i = 0; i < s_.count; ++i) {
      for (int h = 0; h < kHeads; ++h) {
        const std::vector<double> want = Reference(i, h);
        for (int dim = 0; dim < kHeadDim; ++dim) {
          const double got = out_[(i * kHeads + h) * kHeadDim + dim];
          max_error = std::isnan(got) ? INFINITY : std::max(max_error, std::fabs(got - want[dim]));
          squares += want[dim] * want[dim];
        }
      }
    }
    return max_error / std::sqrt(squares / (s_.count * kHeads * kHeadDim));
  }

 private:
  int64_t Offset(int32_t key, int32_t kv_h) const {
    return table_[key / kBlockSize] * kBlockStride +
           KvRowInBlock(key % kBlockSize, kv_h, kBlockSize, kHeadDim);
  }

  void RunHead(int h) {
    std::vector<Tile> lanes;
    for (int l = 0; l < 32; ++l) lanes.emplace_back(problem_, queries_.data(), s_.count, h, l);
    for (int32_t first_key = lanes[0].FirstKey(); first_key <= lanes[0].LastKey();
         first_key += Tile::kKeys) {
      float s[32][kKeyTiles][4] = {};
      for (int j = 0; j < kKeyTiles; ++j) {
        for (int ks = 0; ks < Tile::kDimSteps; ++ks) {
          uint32_t a[32][4], b[32][2];
          float* c[32];
          for (int l = 0; l < 32; ++l) {
            std::copy(lanes[l].QueryFragment(ks), lanes[l].QueryFragment(ks) + 4, a[l]);
            lanes[l].KeyFragment(first_key, j, ks, b[l]);
            c[l] = s[l][j];
          }
          EmulateMma(a, b, c);
        }
      }
      float max[32][2], row_max[32][2];
      for (int l = 0; l < 32; ++l) lanes[l].Score(first_key, s[l], max[l]);
      for (int l = 0; l < 32; ++l) {
        for (int r = 0; r < 2; ++r) {
          row_max[l][r] = -INFINITY;
          for (int q = 4 * (l / 4); q < 4 * (l / 4) + 4; ++q) {
            row_max[l][r] = std::max(row_max[l][r], max[q][r]);
          }
        }
      }
      uint32_t pa[32][Tile::kKeySteps][4];
      for (int l = 0; l < 32; ++l) lanes[l].Absorb(s[l], row_max[l], pa[l]);
      for (int kk = 0; kk < Tile::kKeySteps; ++kk) {
        for (int d = 0; d < Tile::kDimTiles; ++d) {
          uint32_t a[32][4], b[32][2];
          float* c[32];
          for (int l = 0; l < 32; ++l) {
            std::copy(pa[l][kk], pa[l][kk] + 4, a[l]);
            lanes[l].ValueFragment(first_key, kk, d, b[l]);
            c[l] = lanes[l].Output(d);
          }
          EmulateMma(a, b, c);
        }
      }
    }
    for (int l = 0; l < 32; ++l) {
      float row_sum[2] = {0.0f, 0.0f};
      for (int q = 4 * (l / 4); q < 4 * (l / 4) + 4; ++q) {
        for (int r = 0; r < 2; ++r) row_sum[r] += lanes[q].Sum(r);
      }
      lanes[l].Store(row_sum);
    }
  }

  // Query i's output for head h in double precision over the f16 keys and values.
  std::vector<double> Reference(int32_t i, int h) const {
    const int32_t position = s_.first_query + i;
    const int32_t kv_h = h / (kHeads / kKvHeads);
    const float* q = q_.data() + (i * kHeads + h) * kHeadDim;
    std::vector<double> scores;
    double m = s_.sinks ? sinks_[h] : -INFINITY;
    for (int32_t key = FirstVisibleToken(s_.window, position); key <= position; ++key) {
      double dot = 0.0;
      for (int dim = 0; dim < kHeadDim; ++dim) {
        dot += static_cast<double>(q[dim]) * F16ToF32(k_[Offset(key, kv_h) + dim]);
      }
      scores.push_back(dot * problem_.scale);
      m = std::max(m, scores.back());
    }
    double l = s_.sinks ? std::exp(sinks_[h] - m) : 0.0;
    std::vector<double> out(kHeadDim, 0.0);
    int32_t key = FirstVisibleToken(s_.window, position);
    for (const double score : scores) {
      const double p = std::exp(score - m);
      l += p;
      for (int dim = 0; dim < kHeadDim; ++dim) {
        out[dim] += p * F16ToF32(v_[Offset(key, kv_h) + dim]);
      }
      ++key;
    }
    for (double& x : out) x /= l;
    return out;
  }

  Setup s_;
  std::vector<int32_t> table_;
  std::vector<uint16_t> k_, v_;
  std::vector<float> q_, out_, sinks_;
  std::vector<AttentionQuery> queries_;
  FlashProblem problem_;
};

// f16 rounding of Q and P (2^-11 relative) bounds the error; a wrong fragment, mask or
// rescaling is off by the values' own size.
constexpr double kTolerance = 5e-3;

template <int kHeadDim, int kKeyTiles>
void ExpectMatches(const Setup& s, const std::string& what) {
  const double error = Scenario<kHeadDim, kKeyTiles>(s).Error();
  EXPECT_LT(error, kTolerance) << what << ", head size " << kHeadDim << ", " << 8 * kKeyTiles
                               << " keys a step";
}

template <int kHeadDim, int kKeyTiles>
void ExpectAllSetupsMatch() {
  ExpectMatches<kHeadDim, kKeyTiles>({.first_query = 0, .count = 16}, "the first 16 queries");
  ExpectMatches<kHeadDim, kKeyTiles>({.first_query = 29, .count = 16}, "queries 29..44");
  ExpectMatches<kHeadDim, kKeyTiles>({.first_query = 40, .count = 5}, "a partial tile");
  ExpectMatches<kHeadDim, kKeyTiles>({.sinks = true, .first_query = 20, .count = 16},
                                     "with sinks");
  ExpectMatches<kHeadDim, kKeyTiles>({.window = 9, .first_query = 29, .count = 16},
                                     "a 9-token window, its early blocks freed");
}

TEST(FlashAttentionWarpTest, HeadSize64MatchesTheReference) {
  ExpectAllSetupsMatch<64, 2>();
  ExpectAllSetupsMatch<64, 4>();
}

TEST(FlashAttentionWarpTest, HeadSize128MatchesTheReference) { ExpectAllSetupsMatch<128, 4>(); }

TEST(FlashAttentionWarpTest, HeadSize256MatchesTheReference) { ExpectAllSetupsMatch<256, 2>(); }

}  // namespace
}  // namespace baton::kernels::cuda
