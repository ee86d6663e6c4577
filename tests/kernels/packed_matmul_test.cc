// The packed-weight MatMul kernels (packed_block32.h: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0) of every
// level that has them, bit for bit against the scalar definition of the whole-block arithmetic
// (MatMulPackedScalar) and against the level's kernels on the original rows (matmul_tiles.inc):
// odd row counts (a partial last group, a partial half of 8 rows), single rows, small batches,
// batches of every tile remainder and of more than one 32-row pass, canaries around the outputs. And the backend: registering a matrix
// changes no bits. Every row copies back out of the packed form as stored (CopyPackedRow).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <tuple>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/backend.h"
#include "kernels/cpu/cpu_isa.h"
#include "kernels/cpu/dequantize.h"
#include "kernels/cpu/isa_kernels.h"
#include "kernels/cpu/packed_block32.h"
#include "kernels/dtype.h"
#include "kernels/half.h"
#include "tests/kernels/kernel_test_util.h"
#include "tests/kernels/layout_check.h"

namespace baton::kernels {
namespace {

using testing::GuardedBuffer;
using testing::MakeWeights;
using testing::RandomFloats;
using testing::TestWeights;

// Q8_1 activations of x [n, n_cols] as the CPU backend prepares them: f16-rounded scales, rows
// padded to a multiple of 16 with zero scales.
struct Activations {
  std::vector<int8_t> qs;
  std::vector<float> d, s;
  std::vector<int32_t> block_sums;
  MatMulActivations view;
};

Activations Quantize(const std::vector<float>& x, int64_t n, int64_t n_cols) {
  Activations a;
  const int64_t ss = ActivationScaleStride(ActivationFormat::kQ8_1, n_cols);
  const int64_t padded = (n + 15) / 16 * 16;
  a.qs.assign(static_cast<size_t>(padded * n_cols), 0x55);
  a.d.assign(static_cast<size_t>(padded * ss), 0.0f);
  a.s.assign(static_cast<size_t>(padded * ss), 0.0f);
  const int64_t nb = n_cols / kQ8_1BlockSize;
  a.block_sums.resize(static_cast<size_t>(n * nb));
  for (int64_t i = 0; i < n; ++i) {
    QuantizeRowQ8_1Scalar(x.data() + i * n_cols, n_cols, a.qs.data() + i * n_cols,
                          a.d.data() + i * ss, a.s.data() + i * ss);
    Q8_1BlockSums(a.qs.data() + i * n_cols, n_cols, a.block_sums.data() + i * nb);
  }
  for (float& v : a.d) v = F16ToF32(F32ToF16(v));
  for (float& v : a.s) v = F16ToF32(F32ToF16(v));
  a.view = MatMulActivations{.qs = a.qs.data(), .d = a.d.data(), .s = a.s.data(),
                             .block_sums = a.block_sums.data(), .scale_stride = ss};
  return a;
}

MatMulRowsFn ScalarFor(DType dtype) {
  switch (dtype) {
    case DType::kQ4_0: return MatMulPackedScalar<DType::kQ4_0>;
    case DType::kQ4_1: return MatMulPackedScalar<DType::kQ4_1>;
    case DType::kQ5_0: return MatMulPackedScalar<DType::kQ5_0>;
    case DType::kQ5_1: return MatMulPackedScalar<DType::kQ5_1>;
    default: return MatMulPackedScalar<DType::kQ8_0>;
  }
}

// The shapes: weight rows (a partial group of 16, whole groups, both), columns, activation rows.
constexpr DType kTypes[] = {DType::kQ4_0, DType::kQ4_1, DType::kQ5_0, DType::kQ5_1, DType::kQ8_0};
constexpr int64_t kRows[] = {1, 5, 16, 37};
constexpr int64_t kCols[] = {32, 96, 576};
constexpr int64_t kActivationRows[] = {1, 2, 3, 4, 7, 17, 43};

// dtype, weight rows, columns, activation rows.
using Param = std::tuple<DType, int64_t, int64_t, int64_t>;

class PackedMatMulTest : public ::testing::TestWithParam<Param> {};

// One case: weights, their packed copy, quantized activations, and the scalar kernel's y.
struct PackedCase {
  PackedCase(DType dtype, int64_t rows, int64_t cols, int64_t n)
      : w(MakeWeights(dtype, rows, cols, 11 + rows)),
        packed(static_cast<size_t>(PackedBytes(dtype, rows, cols))),
        x(Quantize(RandomFloats(n * cols, 7 + n), n, cols)),
        want(n * rows, NAN) {
    PackGroups(w.matrix(), 0, (rows + 15) / 16, packed.data());
    args = MatMulArgs{.w = packed.data(), .row_bytes = 0, .n_rows = rows, .n_cols = cols,
                      .x = x.view, .n = n};
    args.y = want.data();
    ScalarFor(dtype)(args, 0, rows);
  }
  TestWeights w;
  std::vector<uint8_t> packed;
  Activations x;
  GuardedBuffer want;
  MatMulArgs args;  // on the packed copy; y: want
};

TEST_P(PackedMatMulTest, ScalarKernelIsTheDefinition) {
  const auto [dtype, rows, cols, n] = GetParam();
  const PackedCase c(dtype, rows, cols, n);
  ASSERT_TRUE(c.want.CanariesIntact());
  // The definition is the dot product of the dequantized values, up to f32 rounding.
  const std::vector<float> dense = c.w.Dequantized();
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t r = 0; r < rows; ++r) {
      double dot = 0, x_norm = 0, w_max = 0;
      for (int64_t k = 0; k < cols; ++k) {
        const int64_t ss = c.x.view.scale_stride;
        const double xv = c.x.qs[i * cols + k] * static_cast<double>(c.x.d[i * ss + k / 32]);
        dot += xv * dense[r * cols + k];
        x_norm += std::fabs(xv);
        w_max = std::max<double>(w_max, std::fabs(dense[r * cols + k]));
      }
      const double norm = x_norm * w_max;
      // The f16 rounding of s_x (Q4 minima) costs up to 2^-11 of each block's |m * s|.
      ASSERT_NEAR(c.want[i * rows + r], dot, 2e-3 * norm + 1e-6) << "i " << i << " r " << r;
    }
  }
}

using LevelParam = testing::LevelTypeParam;

class PackedMatMulLevelTest : public ::testing::TestWithParam<LevelParam> {};

// The level's kernels, on the packed copy and on the rows as stored, equal the scalar kernel.
void ExpectLevelEqualsScalar(CpuIsa isa, DType dtype, int64_t rows, int64_t cols, int64_t n) {
  const PackedCase c(dtype, rows, cols, n);
  const IsaKernels& kernels = KernelsFor(isa);
  const MatMulRowsFn kernel = PackedMatMulKernelFor(kernels, dtype);
  ASSERT_NE(kernel, nullptr);
  GuardedBuffer got(n * rows, NAN);
  MatMulArgs args = c.args;
  args.y = got.data();
  // In two ranges of whole groups, as the backend's threads split them.
  const int64_t split = rows > 16 ? 16 : rows;
  kernel(args, 0, split);
  kernel(args, split, rows);
  EXPECT_TRUE(got.CanariesIntact());
  ASSERT_EQ(0, std::memcmp(got.data(), c.want.data(), n * rows * sizeof(float)));

  GuardedBuffer original_y(n * rows, NAN);
  MatMulArgs original = c.args;
  original.w = c.w.bytes.data();
  original.row_bytes = RowBytes(dtype, cols);
  original.y = original_y.data();
  MatMulKernelFor(kernels, dtype)(original, 0, rows);
  EXPECT_TRUE(original_y.CanariesIntact());
  ASSERT_EQ(0, std::memcmp(original_y.data(), c.want.data(), n * rows * sizeof(float)));
}

TEST_P(PackedMatMulLevelTest, EqualsTheScalarKernelBitForBit) {
  const auto [isa, dtype] = GetParam();
  if (const std::string why = testing::MissingIsa(isa); !why.empty()) GTEST_SKIP() << why;
  for (int64_t rows : kRows) {
    for (int64_t cols : kCols) {
      for (int64_t n : kActivationRows) {
        SCOPED_TRACE(testing::MatMulCaseName(dtype, rows, cols, n));
        ExpectLevelEqualsScalar(isa, dtype, rows, cols, n);
      }
    }
  }
}

// Partial groups of 16 rows and of a half of 8, one block and many.
TEST(PackedRowsTest, EveryRowCopiesBackAsStored) {
  testing::ExpectEveryRowCopiesBack(
      {DType::kQ4_0, DType::kQ4_1, DType::kQ5_0, DType::kQ5_1, DType::kQ8_0}, {1, 9, 16, 37},
      {32, 512},
      [](const TestWeights& w) {
        std::vector<uint8_t> packed(static_cast<size_t>(PackedBytes(w.dtype, w.n_rows, w.n_cols)));
        PackGroups(w.matrix(), 0, (w.n_rows + 15) / 16, packed.data());
        return packed;
      },
      CopyPackedRow);
}

TEST_P(PackedMatMulTest, RegisteringWeightsChangesNoBits) {
  const auto [dtype, rows, cols, n] = GetParam();
  const TestWeights w = MakeWeights(dtype, rows, cols, 3 + rows);
  const std::vector<float> x = RandomFloats(n * cols, 5 + n);
  auto backend = CreateCpuBackend({.n_threads = 2});
  std::vector<float> plain(n * rows);
  backend->MatMul(w.matrix(), x.data(), n, plain.data());
  backend->RegisterWeights(w.matrix());
  backend->RegisterWeights(w.matrix());  // counted
  GuardedBuffer registered(n * rows, NAN);
  backend->MatMul(w.matrix(), x.data(), n, registered.data());
  EXPECT_TRUE(registered.CanariesIntact());
  EXPECT_EQ(0, std::memcmp(registered.data(), plain.data(), n * rows * sizeof(float)));
  backend->ReleaseWeights(w.matrix());
  backend->ReleaseWeights(w.matrix());
}

std::string Name(const ::testing::TestParamInfo<Param>& info) {
  const auto [dtype, rows, cols, n] = info.param;
  return testing::MatMulCaseName(dtype, rows, cols, n);
}

INSTANTIATE_TEST_SUITE_P(Shapes, PackedMatMulTest,
                         ::testing::Combine(::testing::ValuesIn(kTypes), ::testing::ValuesIn(kRows),
                                            ::testing::ValuesIn(kCols),
                                            ::testing::ValuesIn(kActivationRows)),
                         Name);

INSTANTIATE_TEST_SUITE_P(Shapes, PackedMatMulLevelTest,
                         ::testing::Combine(::testing::ValuesIn(testing::kSimdIsas),
                                            ::testing::ValuesIn(kTypes)),
                         [](const auto& info) { return testing::LevelTypeCaseName(info.param); });

}  // namespace
}  // namespace baton::kernels
