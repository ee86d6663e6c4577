// The decode products' sweep decides on the CPU what the GPU measured: these stand-in
// measurements check that it picks the fastest variant correct on every shape of a class, never
// a wrong or the baseline one, reports a class with none, and writes entries that the table's
// lookup then returns.
#include "kernels/cuda/matvec_sweep_table.h"

#include <cmath>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cuda/matvec_variants.h"

namespace baton::kernels::cuda {
namespace {

MatVecMeasurement Measured(DType dtype, int64_t n_rows, int64_t n, int variant, double us,
                           double error = 1e-3) {
  return {.shape = "s" + std::to_string(n_rows),
          .dtype = dtype,
          .n_rows = n_rows,
          .n_cols = 4096,
          .n = n,
          .variant = variant,
          .seconds = us * 1e-6,
          .max_error = error,
          .tolerance = 5e-2};
}

TEST(MatVecSweepTableTest, PicksTheFastestVariantCorrectOnEveryShapeOfAClass) {
  const std::vector<MatVecMeasurement> measured = {
      // Q4_0, tall, n = 1: variant 1 is fastest on one shape but wrong on the other; the
      // baseline is faster still and never chosen.
      Measured(DType::kQ4_0, 4096, 1, kBaselineVariant, 1.0),
      Measured(DType::kQ4_0, 4096, 1, 0, 10.0),
      Measured(DType::kQ4_0, 4096, 1, 1, 5.0),
      Measured(DType::kQ4_0, 4096, 1, 2, 9.0),
      Measured(DType::kQ4_0, 14336, 1, 0, 30.0),
      Measured(DType::kQ4_0, 14336, 1, 1, 20.0, /*error=*/0.5),
      Measured(DType::kQ4_0, 14336, 1, 2, 32.0),
      // Q4_0, short, n = 3 (bucket 4): variant 3 wins.
      Measured(DType::kQ4_0, 1024, 3, 0, 8.0),
      Measured(DType::kQ4_0, 1024, 3, 3, 7.0),
  };
  const std::vector<MatVecChoice> chosen = ChooseFastestCorrect(measured);
  ASSERT_EQ(chosen.size(), 2u);
  // Variant 0 totals 40 us, variant 2 41 us; variant 1 failed on 14336 rows.
  EXPECT_EQ(ChooseMatVecVariant(chosen, DType::kQ4_0, 4096, 1), 0);
  EXPECT_EQ(ChooseMatVecVariant(chosen, DType::kQ4_0, 128256, 1), 0);
  EXPECT_EQ(ChooseMatVecVariant(chosen, DType::kQ4_0, 1024, 4), 3);
  EXPECT_EQ(ChooseMatVecVariant(chosen, DType::kQ4_0, 1024, 3), 3);
  // Classes not measured fall back to the default.
  EXPECT_EQ(ChooseMatVecVariant(chosen, DType::kQ4_0, 1024, 1), kDefaultMatVecVariant);
  EXPECT_EQ(ChooseMatVecVariant(chosen, DType::kQ6_K, 4096, 1), kDefaultMatVecVariant);
  EXPECT_TRUE(ClassesWithoutACorrectVariant(measured).empty());
}

TEST(MatVecSweepTableTest, AClassWithNoCorrectVariantIsReportedAndGetsNoEntry) {
  const std::vector<MatVecMeasurement> measured = {
      Measured(DType::kQ6_K, 4096, 8, kBaselineVariant, 50.0),
      Measured(DType::kQ6_K, 4096, 8, 0, 10.0, /*error=*/0.2),
      Measured(DType::kQ6_K, 4096, 8, 1, 10.0, /*error=*/std::nan("")),
  };
  EXPECT_TRUE(ChooseFastestCorrect(measured).empty());
  const std::vector<std::string> failed = ClassesWithoutACorrectVariant(measured);
  ASSERT_EQ(failed.size(), 1u);
  EXPECT_EQ(failed[0], "q6_K tall n<=8");
}

TEST(MatVecSweepTableTest, WritesTheMarkdownTableAndTheTableSource) {
  const std::vector<MatVecMeasurement> measured = {
      Measured(DType::kQ4_K, 1024, 2, kBaselineVariant, 20.0),
      Measured(DType::kQ4_K, 1024, 2, 2, 2.0),
  };
  const std::vector<MatVecChoice> chosen = ChooseFastestCorrect(measured);
  const std::string markdown = FormatSweepMarkdown(measured, chosen, 4e12);
  EXPECT_NE(markdown.find("| s1024 | q4_K | 1024x4096 | 2 | exact-f32 (baseline) | 20.00 |"),
            std::string::npos)
      << markdown;
  // 1024 rows of 2304 bytes in 2 us: 1180 GB/s, 29.5% of 4 TB/s.
  EXPECT_NE(markdown.find("| w4x1 **chosen** | 2.00 | 1180 | 29.5% |"), std::string::npos)
      << markdown;
  EXPECT_EQ(FormatTableSource(chosen),
            "    {DType::kQ4_K, MatrixHeight::kShort, 2, 2},  // w4x1\n");
}

TEST(MatVecSweepTableTest, RowCountsRoundUpToTheKernelsBuckets) {
  EXPECT_EQ(MatVecRowBucket(1), 1);
  EXPECT_EQ(MatVecRowBucket(2), 2);
  EXPECT_EQ(MatVecRowBucket(3), 4);
  EXPECT_EQ(MatVecRowBucket(5), 8);
  EXPECT_EQ(MatVecRowBucket(8), 8);
}

TEST(MatVecSweepTableTest, TheCommittedTableNamesRealVariantsAndBuckets) {
  for (const MatVecChoice& c : MatVecTable()) {
    EXPECT_GE(c.variant, 0);
    EXPECT_LT(c.variant, static_cast<int>(kMatVecVariants.size()));
    EXPECT_EQ(MatVecRowBucket(c.row_bucket), c.row_bucket);
  }
}

}  // namespace
}  // namespace baton::kernels::cuda
