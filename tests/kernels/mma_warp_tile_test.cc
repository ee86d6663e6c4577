// The quantized tensor-core product's warp tiles (kernels/cuda/mma_warp_tile.h) without a GPU:
// 32 lanes step in lockstep through each 32-value group, and between their Load and Accumulate
// the tensor-core instruction is emulated from the PTX ISA's fragment tables, written out here
// independently of the code under test. Every warp tile of a matrix then gives y; it must be
// the exact product of the dequantized weights and the 8-bit activations (the integers the
// instruction sums are exact; only the f32 scaling rounds), for each type, tile shape, and for
// row and token counts that end inside a tile.
#include "kernels/cuda/mma_warp_tile.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/dequantize.h"
#include "kernels/cpu/quantize.h"
#include "kernels/cuda/split_geometry.h"

namespace baton::kernels::cuda {
namespace {

int8_t ByteOf(uint32_t word, int k) { return static_cast<int8_t>((word >> (8 * k)) & 0xff); }

// mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 over a warp: lane l's registers a[l][0..3],
// b[l][0..2] in, c[l][0..4] out. The PTX ISA's tables, for lane l with group g = l >> 2 and
// thread-in-group t = l % 4: A element i (of 16 bytes over 4 registers) is row g + 8 * ((i / 4)
// % 2), column 4 t + i % 4 + 16 * (i / 8); B element i (8 bytes over 2 registers) is row (k)
// 4 t + i % 4 + 16 * (i / 4), column g; C element i is row g + 8 * (i / 2), column 2 t + i % 2.
void EmulateMma(const uint32_t a[32][4], const uint32_t b[32][2], int32_t c[32][4]) {
  int32_t am[16][32] = {}, bm[32][8] = {};
  for (int l = 0; l < 32; ++l) {
    const int g = l / 4, t = l % 4;
    for (int i = 0; i < 16; ++i) {
      am[g + 8 * ((i / 4) % 2)][4 * t + i % 4 + 16 * (i / 8)] = ByteOf(a[l][i / 4], i % 4);
    }
    for (int i = 0; i < 8; ++i) bm[4 * t + i % 4 + 16 * (i / 4)][g] = ByteOf(b[l][i / 4], i % 4);
  }
  for (int l = 0; l < 32; ++l) {
    const int g = l / 4, t = l % 4;
    for (int i = 0; i < 4; ++i) {
      const int row = g + 8 * (i / 2), col = 2 * t + i % 2;
      int32_t sum = 0;
      for (int k = 0; k < 32; ++k) sum += am[row][k] * bm[k][col];
      c[l][i] = sum;
    }
  }
}

// x [n, n_cols] quantized as the GPU's activation kernel does: per 32 values d = max|x| / 127,
// p = round(x / d) (ties to even), and the pair (d, d * sum p).
struct QuantizedX {
  std::vector<int8_t> q;
  std::vector<float> ds;
};
QuantizedX QuantizeX(const std::vector<float>& x, int64_t n, int64_t n_cols) {
  QuantizedX out{std::vector<int8_t>(x.size()), std::vector<float>(2 * n * (n_cols / 32))};
  for (int64_t blk = 0; blk < n * (n_cols / 32); ++blk) {
    float amax = 0.0f;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[32 * blk + j]));
    const float d = amax / 127.0f;
    int sum = 0;
    for (int j = 0; j < 32; ++j) {
      const int p = amax == 0.0f ? 0 : static_cast<int>(std::nearbyint(x[32 * blk + j] / d));
      out.q[32 * blk + j] = static_cast<int8_t>(p);
      sum += p;
    }
    out.ds[2 * blk] = d;
    out.ds[2 * blk + 1] = d * static_cast<float>(sum);
  }
  return out;
}

// y [n, n_rows] from every warp tile of 16 kTilesM rows x 8 kTilesN tokens, run as 32 lanes.
template <typename Groups, int kTilesM, int kTilesN>
std::vector<float> RunWarpTiles(const MmaProblem& p) {
  using Tile = MmaWarpTile<Groups, kTilesM, kTilesN>;
  std::vector<float> y(static_cast<size_t>(p.n * p.n_rows), NAN);
  for (int64_t row = 0; row < p.n_rows; row += 16 * kTilesM) {
    for (int64_t token = 0; token < p.n; token += 8 * kTilesN) {
      std::vector<Tile> lanes;
      for (int l = 0; l < 32; ++l) lanes.emplace_back(p, row, token, l);
      std::vector<typename Tile::Operands> ops(32);
      for (int64_t k = 0; k < lanes[0].groups(); ++k) {
        for (int l = 0; l < 32; ++l) lanes[l].Load(k, &ops[l]);
        for (int m = 0; m < kTilesM; ++m) {
          for (int n = 0; n < kTilesN; ++n) {
            uint32_t a[32][4], b[32][2];
            int32_t c[32][4];
            for (int l = 0; l < 32; ++l) {
              std::copy(ops[l].a[m], ops[l].a[m] + 4, a[l]);
              std::copy(ops[l].b[n], ops[l].b[n] + 2, b[l]);
            }
            EmulateMma(a, b, c);
            for (int l = 0; l < 32; ++l) lanes[l].Accumulate(ops[l], m, n, c[l]);
          }
        }
      }
      for (Tile& lane : lanes) lane.Store(y.data());
    }
  }
  return y;
}

struct Case {
  DType dtype;
  int64_t n_rows, n_cols, n;
};

class MmaWarpTileTest : public ::testing::TestWithParam<Case> {
 protected:
  // Runs the tiles (kTilesM x kTilesN) and compares with the exact product of the dequantized
  // weights and the dequantized 8-bit activations.
  template <typename Groups, int kTilesM, int kTilesN>
  void Check() {
    const Case c = GetParam();
    ASSERT_EQ(Groups::kType, c.dtype);
    std::mt19937 rng(7);
    std::normal_distribution<float> normal(0.0f, 0.5f);
    const int64_t row_bytes = RowBytes(c.dtype, c.n_cols);
    std::vector<uint8_t> stored(static_cast<size_t>(c.n_rows * row_bytes));
    std::vector<float> values(static_cast<size_t>(c.n_cols));
    for (int64_t r = 0; r < c.n_rows; ++r) {
      for (float& v : values) v = normal(rng);
      QuantizeRow(c.dtype, values.data(), c.n_cols, stored.data() + r * row_bytes);
    }
    std::vector<float> x(static_cast<size_t>(c.n * c.n_cols));
    for (float& v : x) v = normal(rng);
    const QuantizedX xq = QuantizeX(x, c.n, c.n_cols);

    const SplitGeometry g = *SplitGeometryOf(c.dtype);
    const int64_t n_blocks = c.n_rows * (c.n_cols / g.block_values);
    const std::vector<uint8_t> split = SplitOnHost(g, stored, n_blocks);
    const SplitView view = SplitViewOf(g, split.data(), n_blocks);
    const MmaProblem p{.bits = view.bits, .headers = view.headers, .n_rows = c.n_rows,
                       .n_cols = c.n_cols, .bits_bytes = g.bits_bytes,
                       .header_bytes = g.header_bytes(), .block_values = g.block_values,
                       .q = xq.q.data(), .ds = xq.ds.data(), .n = c.n};
    const std::vector<float> y = RunWarpTiles<Groups, kTilesM, kTilesN>(p);

    std::vector<float> w(static_cast<size_t>(c.n_cols));
    double max_error = 0.0, squares = 0.0;
    for (int64_t r = 0; r < c.n_rows; ++r) {
      DequantizeRow(c.dtype, stored.data() + r * row_bytes, w.data(), c.n_cols);
      for (int64_t i = 0; i < c.n; ++i) {
        double want = 0.0;
        for (int64_t j = 0; j < c.n_cols; ++j) {
          want += static_cast<double>(w[j]) * xq.ds[2 * (i * (c.n_cols / 32) + j / 32)] *
                  xq.q[i * c.n_cols + j];
        }
        const double got = y[i * c.n_rows + r];
        max_error = std::isnan(got) ? INFINITY : std::max(max_error, std::fabs(got - want));
        squares += want * want;
      }
    }
    const double rms = std::sqrt(squares / static_cast<double>(c.n_rows * c.n));
    EXPECT_LT(max_error / rms, 1e-5) << DTypeName(c.dtype) << " tiles " << kTilesM << "x"
                                     << kTilesN;
  }

  template <typename Groups>
  void CheckTileShapes() {
    Check<Groups, 1, 1>();
    Check<Groups, 1, 4>();
    Check<Groups, 2, 2>();
    Check<Groups, 2, 8>();
  }
};

TEST_P(MmaWarpTileTest, EqualsTheExactProductOfWhatItMultiplies) {
  switch (GetParam().dtype) {
    case DType::kQ4_0: CheckTileShapes<MmaGroupsQ4_0>(); break;
    case DType::kQ4_1: CheckTileShapes<MmaGroupsQ4_1>(); break;
    case DType::kQ8_0: CheckTileShapes<MmaGroupsQ8_0>(); break;
    case DType::kQ4_K: CheckTileShapes<MmaGroupsQ4_K>(); break;
    default: FAIL() << "no groups for " << DTypeName(GetParam().dtype);
  }
}

// Rows and tokens that fill whole tiles, and counts that end inside one (rows 40 = 2.5 tiles
// of 16, tokens 13); Q4_K's 8 groups per block over two blocks a row.
INSTANTIATE_TEST_SUITE_P(
    Types, MmaWarpTileTest,
    ::testing::Values(Case{DType::kQ4_0, 64, 96, 16}, Case{DType::kQ4_0, 40, 64, 13},
                      Case{DType::kQ4_1, 32, 64, 8}, Case{DType::kQ4_1, 40, 96, 13},
                      Case{DType::kQ8_0, 48, 64, 16}, Case{DType::kQ8_0, 40, 32, 3},
                      Case{DType::kQ4_K, 32, 512, 16}, Case{DType::kQ4_K, 40, 256, 13}),
    [](const ::testing::TestParamInfo<Case>& info) {
      return std::string(DTypeName(info.param.dtype)) + "_" +
             std::to_string(info.param.n_rows) + "x" + std::to_string(info.param.n_cols) +
             "_n" + std::to_string(info.param.n);
    });

}  // namespace
}  // namespace baton::kernels::cuda
