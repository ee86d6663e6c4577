// The interleaved layout of float weights (interleaved_rows.h): every row's units
// where LocateRow says and copied back out as stored (CopyInterleavedRow), and the same kernel
// giving the same bits on it as on the original rows, through the backend (registered weights)
// and called directly on row ranges that cut groups.
#include "kernels/cpu/interleaved_rows.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <tuple>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/backend.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/cpu_isa.h"
#include "kernels/cpu/dequantize.h"
#include "kernels/cpu/isa_kernels.h"
#include "kernels/dtype.h"
#include "tests/kernels/kernel_test_util.h"
#include "tests/kernels/layout_check.h"

namespace baton::kernels {
namespace {

using testing::MakeWeights;
using testing::RandomFloats;
using testing::TestWeights;

// Rows: one, a partial group alone, whole groups, whole groups and a partial one.
constexpr DType kTypes[] = {DType::kF32, DType::kF16, DType::kBF16};
constexpr int64_t kRows[] = {1, 3, 8, 37, 70};
constexpr int64_t kCols[] = {256, 768};
constexpr int64_t kActivationRows[] = {1, 3, 5};

// dtype, rows, cols, n (activation rows)
using Param = std::tuple<DType, int64_t, int64_t, int64_t>;

class InterleavedRowsTest : public ::testing::TestWithParam<Param> {};

// The same with a CPU level first: the kernels' checks, one test per level.
using LevelParam = testing::LevelTypeParam;
class InterleavedRowsLevelTest : public ::testing::TestWithParam<LevelParam> {};

TEST_P(InterleavedRowsTest, LocateRowFindsEveryBlockOfEveryRow) {
  const auto [dtype, rows, cols, n] = GetParam();
  const TestWeights w = MakeWeights(dtype, rows, cols, 3 + rows, /*random_bits=*/true);
  std::vector<uint8_t> interleaved(w.bytes.size());
  InterleaveGroups(w.matrix(), 0, InterleavedGroups(w.matrix()), interleaved.data());
  MatMulArgs args;
  args.w = interleaved.data();
  args.row_bytes = RowBytes(dtype, cols);
  args.n_rows = rows;
  args.interleave = kInterleaveRows;
  const int64_t unit_bytes = InterleaveUnitBytes(dtype, cols);
  ASSERT_GT(unit_bytes, 0);
  for (int64_t r = 0; r < rows; ++r) {
    const RowBlocks located = LocateRow(args, r, unit_bytes);
    for (int64_t b = 0; b < args.row_bytes / unit_bytes; ++b) {
      ASSERT_EQ(0, std::memcmp(located.first + b * located.stride,
                               w.bytes.data() + r * args.row_bytes + b * unit_bytes,
                               static_cast<size_t>(unit_bytes)))
          << "row " << r << " unit " << b;
    }
  }
}

// Partial groups of 4 rows, one unit and many.
TEST(InterleavedRowCopyTest, EveryRowCopiesBackAsStored) {
  testing::ExpectEveryRowCopiesBack(
      {DType::kF32, DType::kF16, DType::kBF16}, {1, 3, 4, 9}, {32, 512},
      [](const TestWeights& w) {
        std::vector<uint8_t> interleaved(w.bytes.size());
        InterleaveGroups(w.matrix(), 0, InterleavedGroups(w.matrix()), interleaved.data());
        return interleaved;
      },
      CopyInterleavedRow);
}

TEST_P(InterleavedRowsLevelTest, KernelsGiveTheSameBitsOnBothLayouts) {
  const auto [isa, dtype] = GetParam();
  if (const std::string why = testing::MissingIsa(isa); !why.empty()) GTEST_SKIP() << why;
  for (int64_t rows : kRows) {
    for (int64_t cols : kCols) {
      for (int64_t n : kActivationRows) {
        SCOPED_TRACE(testing::MatMulCaseName(dtype, rows, cols, n));
        const TestWeights w = MakeWeights(dtype, rows, cols, 5 + rows);
        const std::vector<float> x = RandomFloats(n * cols, 7 + n);
        std::vector<uint8_t> interleaved(w.bytes.size());
        InterleaveGroups(w.matrix(), 0, InterleavedGroups(w.matrix()), interleaved.data());
        MatMulArgs layout;
        layout.w = interleaved.data();
        layout.interleave = kInterleaveRows;
        testing::ExpectSameBitsOnLayout(isa, w, x, n, layout);
      }
    }
  }
}

TEST(InterleaveUnitBytesTest, WholeCacheLinesOfFloats) {
  EXPECT_EQ(InterleaveUnitBytes(DType::kF16, 576), 64);
  EXPECT_EQ(InterleaveUnitBytes(DType::kF32, 16), 64);
  // Float rows that are not a whole number of 64-byte units, the packed types and the
  // super-block types (which have lanes, super_block_lanes.h): none.
  EXPECT_EQ(InterleaveUnitBytes(DType::kF16, 37), 0);
  EXPECT_EQ(InterleaveUnitBytes(DType::kBF16, 48), 0);
  EXPECT_EQ(InterleaveUnitBytes(DType::kQ4_0, 256), 0);
  EXPECT_EQ(InterleaveUnitBytes(DType::kQ4_K, 256), 0);
}

// A float matrix without an interleaved layout is not registered and keeps its results.
TEST(InterleaveUnitBytesTest, FloatRowsOfPartialUnitsRunAsStored) {
  const TestWeights w = MakeWeights(DType::kF16, 9, 37, 11);
  const std::vector<float> x = RandomFloats(3 * 37, 12);
  auto backend = CreateCpuBackendForIsa({.n_threads = 2}, DetectCpuIsaUncapped());
  std::vector<float> plain(3 * 9), after(3 * 9);
  backend->MatMul(w.matrix(), x.data(), 3, plain.data());
  EXPECT_FALSE(backend->RegisterWeights(w.matrix()));
  backend->MatMul(w.matrix(), x.data(), 3, after.data());
  EXPECT_EQ(0, std::memcmp(after.data(), plain.data(), after.size() * sizeof(float)));
}

std::string Name(const ::testing::TestParamInfo<Param>& info) {
  const auto [dtype, rows, cols, n] = info.param;
  return testing::MatMulCaseName(dtype, rows, cols, n);
}

INSTANTIATE_TEST_SUITE_P(Shapes, InterleavedRowsTest,
                         ::testing::Combine(::testing::ValuesIn(kTypes), ::testing::ValuesIn(kRows),
                                            ::testing::ValuesIn(kCols),
                                            ::testing::ValuesIn(kActivationRows)),
                         Name);

INSTANTIATE_TEST_SUITE_P(Shapes, InterleavedRowsLevelTest,
                         ::testing::Combine(::testing::ValuesIn(testing::kSimdIsas),
                                            ::testing::ValuesIn(kTypes)),
                         [](const auto& info) { return testing::LevelTypeCaseName(info.param); });

}  // namespace
}  // namespace baton::kernels
