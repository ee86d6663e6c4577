// The lanes layout of the super-block types (super_block_lanes.h): every byte of every row where
// the layout says and copied back out as stored (CopyLanesRow), zero rows padding the last group,
// and the kernels giving the same bits on it as on the rows as stored (decode and panel paths,
// ranges that cut groups, every level).
#include "kernels/cpu/super_block_lanes.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/backend.h"
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

// Rows: one, a partial group alone, one group, whole groups and a partial one. Activation rows:
// a lanes tile at every level (1, 3; 4: a whole AVX2 tile), the panel at every level (17) and,
// by level, either (5; 8: a whole AVX-512 tile).
constexpr DType kTypes[] = {DType::kQ2_K, DType::kQ3_K, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K};
constexpr int64_t kRows[] = {1, 3, 8, 37, 70};
constexpr int64_t kCols[] = {256, 768};
constexpr int64_t kActivationRows[] = {1, 3, 4, 5, 8, 17};

// dtype, rows, cols, n (activation rows)
using Param = std::tuple<DType, int64_t, int64_t, int64_t>;

class SuperBlockLanesTest : public ::testing::TestWithParam<Param> {};

// The same with a CPU level first: the kernels' checks, one test per level.
using LevelParam = testing::LevelTypeParam;
class SuperBlockLanesLevelTest : public ::testing::TestWithParam<LevelParam> {};

TEST_P(SuperBlockLanesTest, EveryByteWhereTheLayoutSays) {
  const auto [dtype, rows, cols, n] = GetParam();
  const TestWeights w = MakeWeights(dtype, rows, cols, 3 + rows, /*random_bits=*/true);
  std::vector<uint8_t> lanes(SuperBlockLanesBytes(w.matrix()), 0xaa);
  LayOutLaneGroups(w.matrix(), 0, LaneGroups(rows), lanes.data());
  const int64_t block_bytes = Traits(dtype).block_bytes;
  const int64_t row_bytes = RowBytes(dtype, cols);
  const int64_t dwords = block_bytes / 4, tail = block_bytes % 4;
  for (int64_t r = 0; r < LaneGroups(rows) * kLaneRows; ++r) {
    const int64_t g = r / kLaneRows, j = r % kLaneRows;
    for (int64_t b = 0; b < row_bytes / block_bytes; ++b) {
      const uint8_t* group_block = lanes.data() + g * kLaneRows * row_bytes +
                                   b * kLaneRows * block_bytes;
      for (int64_t k = 0; k < block_bytes; ++k) {
        const int64_t at =
            k < 4 * dwords
                ? (kLaneRows * LaneDwordSlot(dtype, static_cast<int>(k / 4)) + j) * 4 + k % 4
                : kLaneRows * 4 * dwords + j * tail + (k - 4 * dwords);
        const uint8_t expected = r < rows ? w.bytes[r * row_bytes + b * block_bytes + k] : 0;
        ASSERT_EQ(group_block[at], expected) << "row " << r << " block " << b << " byte " << k;
      }
    }
  }
}

// Partial groups of 8 rows, one super-block and two.
TEST(SuperBlockLanesRowCopyTest, EveryRowCopiesBackAsStored) {
  testing::ExpectEveryRowCopiesBack(
      {DType::kQ2_K, DType::kQ3_K, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K}, {1, 7, 8, 19},
      {256, 512},
      [](const TestWeights& w) {
        std::vector<uint8_t> lanes(SuperBlockLanesBytes(w.matrix()));
        LayOutLaneGroups(w.matrix(), 0, LaneGroups(w.n_rows), lanes.data());
        return lanes;
      },
      CopyLanesRow);
}

TEST_P(SuperBlockLanesLevelTest, KernelsGiveTheSameBitsAsOnStoredRows) {
  const auto [isa, dtype] = GetParam();
  if (const std::string why = testing::MissingIsa(isa); !why.empty()) GTEST_SKIP() << why;
  for (int64_t rows : kRows) {
    for (int64_t cols : kCols) {
      for (int64_t n : kActivationRows) {
        for (bool random_bits : {false, true}) {
          SCOPED_TRACE(testing::MatMulCaseName(dtype, rows, cols, n) +
                       (random_bits ? ", random bits" : ", quantized values"));
          const TestWeights w = MakeWeights(dtype, rows, cols, 5 + rows, random_bits);
          const std::vector<float> x = RandomFloats(n * cols, 7 + n);
          std::vector<uint8_t> lanes(SuperBlockLanesBytes(w.matrix()));
          LayOutLaneGroups(w.matrix(), 0, LaneGroups(rows), lanes.data());
          MatMulArgs layout;
          layout.w = lanes.data();
          layout.super_block_lanes = true;
          testing::ExpectSameBitsOnLayout(isa, w, x, n, layout);
        }
      }
    }
  }
}

// Each type's slots are a permutation of its dwords.
TEST(SuperBlockLanesTypesTest, SlotsArePermutations) {
  for (DType dtype : {DType::kQ2_K, DType::kQ3_K, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K}) {
    const int dwords = static_cast<int>(Traits(dtype).block_bytes / 4);
    std::vector<int> seen(dwords, 0);
    for (int q = 0; q < dwords; ++q) {
      const int slot = LaneDwordSlot(dtype, q);
      ASSERT_GE(slot, 0) << DTypeName(dtype);
      ASSERT_LT(slot, dwords) << DTypeName(dtype);
      ++seen[slot];
    }
    EXPECT_EQ(std::count(seen.begin(), seen.end(), 1), dwords) << DTypeName(dtype);
  }
}

TEST(SuperBlockLanesTypesTest, TheSuperBlockTypesOnly) {
  for (DType dtype : {DType::kQ2_K, DType::kQ3_K, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K}) {
    EXPECT_TRUE(HasSuperBlockLanes(dtype)) << DTypeName(dtype);
  }
  for (DType dtype : {DType::kQ4_0, DType::kQ8_0, DType::kF16, DType::kF32}) {
    EXPECT_FALSE(HasSuperBlockLanes(dtype)) << DTypeName(dtype);
  }
}

std::string Name(const ::testing::TestParamInfo<Param>& info) {
  const auto [dtype, rows, cols, n] = info.param;
  return testing::MatMulCaseName(dtype, rows, cols, n);
}

INSTANTIATE_TEST_SUITE_P(Shapes, SuperBlockLanesTest,
                         ::testing::Combine(::testing::ValuesIn(kTypes), ::testing::ValuesIn(kRows),
                                            ::testing::ValuesIn(kCols),
                                            ::testing::ValuesIn(kActivationRows)),
                         Name);

INSTANTIATE_TEST_SUITE_P(Shapes, SuperBlockLanesLevelTest,
                         ::testing::Combine(::testing::ValuesIn(testing::kSimdIsas),
                                            ::testing::ValuesIn(kTypes)),
                         [](const auto& info) { return testing::LevelTypeCaseName(info.param); });

}  // namespace
}  // namespace baton::kernels
