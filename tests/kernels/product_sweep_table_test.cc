// The quantized products' sweep decides on the CPU what the GPU measured: these stand-in
// measurements check that it picks the fastest variant correct on every shape of a class, never
// a wrong or a reference one (the exact f32 baseline, cuBLAS alone), takes the f16 GEMM past 8
// rows where it is fastest, reports a class with none, and writes entries that the table's
// lookup then returns.
#include "kernels/cuda/product_sweep_table.h"

#include <cmath>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cuda/product_variants.h"

namespace baton::kernels::cuda {
namespace {

ProductMeasurement Measured(DType dtype, int64_t n_rows, int64_t n, int variant, double us,
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

TEST(ProductSweepTableTest, PicksTheFastestVariantCorrectOnEveryShapeOfAClass) {
  const std::vector<ProductMeasurement> measured = {
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
  const std::vector<ProductChoice> chosen = ChooseFastestCorrect(measured);
  ASSERT_EQ(chosen.size(), 2u);
  // Variant 0 totals 40 us, variant 2 41 us; variant 1 failed on 14336 rows.
  EXPECT_EQ(ChooseProductVariant(chosen, DType::kQ4_0, 4096, 1), 0);
  EXPECT_EQ(ChooseProductVariant(chosen, DType::kQ4_0, 128256, 1), 0);
  EXPECT_EQ(ChooseProductVariant(chosen, DType::kQ4_0, 1024, 4), 3);
  EXPECT_EQ(ChooseProductVariant(chosen, DType::kQ4_0, 1024, 3), 3);
  // Classes not measured fall back to the default.
  EXPECT_EQ(ChooseProductVariant(chosen, DType::kQ4_0, 1024, 1), kDefaultMatVecVariant);
  EXPECT_EQ(ChooseProductVariant(chosen, DType::kQ6_K, 4096, 1), kDefaultMatVecVariant);
  EXPECT_TRUE(ClassesWithoutACorrectVariant(measured).empty());
}

TEST(ProductSweepTableTest, AClassWithNoCorrectVariantIsReportedAndGetsNoEntry) {
  const std::vector<ProductMeasurement> measured = {
      Measured(DType::kQ6_K, 4096, 8, kBaselineVariant, 50.0),
      Measured(DType::kQ6_K, 4096, 8, 0, 10.0, /*error=*/0.2),
      Measured(DType::kQ6_K, 4096, 8, 1, 10.0, /*error=*/std::nan("")),
  };
  EXPECT_TRUE(ChooseFastestCorrect(measured).empty());
  const std::vector<std::string> failed = ClassesWithoutACorrectVariant(measured);
  ASSERT_EQ(failed.size(), 1u);
  EXPECT_EQ(failed[0], "q6_K tall n<=8");
}

TEST(ProductSweepTableTest, WritesTheMarkdownTableAndTheTableSource) {
  const std::vector<ProductMeasurement> measured = {
      Measured(DType::kQ4_K, 1024, 2, kBaselineVariant, 20.0),
      Measured(DType::kQ4_K, 1024, 2, 2, 2.0),
  };
  const std::vector<ProductChoice> chosen = ChooseFastestCorrect(measured);
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

TEST(ProductSweepTableTest, RowCountsRoundUpToTheKernelsBuckets) {
  EXPECT_EQ(ProductRowBucket(1), 1);
  EXPECT_EQ(ProductRowBucket(2), 2);
  EXPECT_EQ(ProductRowBucket(3), 4);
  EXPECT_EQ(ProductRowBucket(5), 8);
  EXPECT_EQ(ProductRowBucket(8), 8);
  EXPECT_EQ(ProductRowBucket(9), 16);
  EXPECT_EQ(ProductRowBucket(256), 256);
  EXPECT_EQ(ProductRowBucket(257), 512);
  EXPECT_EQ(ProductRowBucket(2047), 2048);
  EXPECT_EQ(ProductRowBucket(100000), 8192);
}

TEST(ProductSweepTableTest, PastEightRowsTheTensorCoresOrTheF16GemmWhicheverIsFaster) {
  const std::vector<ProductMeasurement> measured = {
      // Q4_0 tall, 32 rows: mma variant 1 beats the f16 GEMM; cuBLAS alone (a reference) is
      // faster still and never chosen.
      Measured(DType::kQ4_0, 4096, 32, kCublasAloneVariant, 1.0),
      Measured(DType::kQ4_0, 4096, 32, kF16GemmVariant, 20.0),
      Measured(DType::kQ4_0, 4096, 32, 0, 12.0),
      Measured(DType::kQ4_0, 4096, 32, 1, 9.0),
      // Q4_0 tall, 2048 rows: the f16 GEMM wins; mma variant 3 is faster but wrong.
      Measured(DType::kQ4_0, 4096, 2048, kF16GemmVariant, 100.0),
      Measured(DType::kQ4_0, 4096, 2048, 2, 140.0),
      Measured(DType::kQ4_0, 4096, 2048, 3, 60.0, /*error=*/0.3),
  };
  const std::vector<ProductChoice> chosen = ChooseFastestCorrect(measured);
  ASSERT_EQ(chosen.size(), 2u);
  EXPECT_EQ(ChooseProductVariant(chosen, DType::kQ4_0, 4096, 32), 1);
  EXPECT_EQ(ChooseProductVariant(chosen, DType::kQ4_0, 4096, 17), 1);
  EXPECT_EQ(ChooseProductVariant(chosen, DType::kQ4_0, 4096, 2048), kF16GemmVariant);
  EXPECT_EQ(ChooseProductVariant(chosen, DType::kQ4_0, 4096, 1500), kF16GemmVariant);
  // Unmeasured classes past 8 rows take the f16 GEMM; up to 8, the default matrix-vector one.
  EXPECT_EQ(ChooseProductVariant(chosen, DType::kQ4_0, 4096, 64), kF16GemmVariant);
  EXPECT_EQ(ChooseProductVariant(chosen, DType::kQ4_0, 4096, 8), kDefaultMatVecVariant);
  // A tensor-core entry for a type without a tensor-core product is not taken.
  const ProductChoice q6k[] = {{DType::kQ6_K, MatrixHeight::kTall, 32, 1}};
  EXPECT_EQ(ChooseProductVariant(q6k, DType::kQ6_K, 4096, 32), kF16GemmVariant);

  const std::string markdown = FormatSweepMarkdown(measured, chosen, 4e12);
  // 2 x 32 x 4096 x 4096 flops in 9 us: 119.3 TFLOP/s; cuBLAS alone took 1 us: 11.1%.
  EXPECT_NE(markdown.find("| mma-w4-m1n4 **chosen** | 9.00 | 1049 | 26.2% | 119.3 | 11.1% |"),
            std::string::npos)
      << markdown;
  EXPECT_NE(markdown.find("| cublas-f16-alone (reference) | 1.00 |"), std::string::npos);
  EXPECT_NE(markdown.find("| f16-gemm **chosen** | 100.00 |"), std::string::npos);
  EXPECT_EQ(FormatTableSource(chosen),
            "    {DType::kQ4_0, MatrixHeight::kTall, 32, 1},  // mma-w4-m1n4\n"
            "    {DType::kQ4_0, MatrixHeight::kTall, 2048, kF16GemmVariant},  // f16-gemm\n");
}

// What the sweep prints is what BATON_CUDA_PRODUCT_TABLE reads back.
TEST(ProductSweepTableTest, AWrittenTableParsesBackToTheSameChoices) {
  const std::vector<ProductChoice> chosen = {
      {DType::kQ4_0, MatrixHeight::kShort, 1, 2},
      {DType::kQ4_K, MatrixHeight::kTall, 32, 3},
      {DType::kQ6_K, MatrixHeight::kTall, 2048, kF16GemmVariant},
  };
  const std::string text = "// the sweep's table\n\n" + FormatTableSource(chosen);
  absl::StatusOr<std::vector<ProductChoice>> parsed = ParseProductTable(text);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  ASSERT_EQ(parsed->size(), chosen.size());
  for (size_t i = 0; i < chosen.size(); ++i) {
    EXPECT_EQ((*parsed)[i].dtype, chosen[i].dtype);
    EXPECT_EQ((*parsed)[i].height, chosen[i].height);
    EXPECT_EQ((*parsed)[i].row_bucket, chosen[i].row_bucket);
    EXPECT_EQ((*parsed)[i].variant, chosen[i].variant);
  }
  EXPECT_EQ(ChooseProductVariant(*parsed, DType::kQ4_K, 14336, 20), 3);
}

TEST(ProductSweepTableTest, ABadTableLineIsRefusedSayingWhichAndWhy) {
  const std::pair<const char*, const char*> bad[] = {
      {"{DType::kQ4_0, MatrixHeight::kTall, 1, 0},\nnonsense\n", "line 2: not an entry"},
      {"{DType::kF16, MatrixHeight::kTall, 1, 0},", "line 1: 'DType::kF16' has no quantized"},
      {"{DType::kQ4_0, MatrixHeight::kWide, 1, 0},", "'MatrixHeight::kWide' is not"},
      {"{DType::kQ4_0, MatrixHeight::kTall, 3, 0},", "'3' is not one of the row buckets"},
      {"{DType::kQ4_0, MatrixHeight::kTall, 8, 4},", "variant 4 does not exist"},
      {"{DType::kQ4_0, MatrixHeight::kTall, 8, kF16GemmVariant},", "does not exist"},
      {"{DType::kQ6_K, MatrixHeight::kTall, 64, 1},", "does not exist for DType::kQ6_K"},
      {"{DType::kQ4_0, MatrixHeight::kTall, 64},", "wants 4 fields"},
  };
  for (const auto& [text, message] : bad) {
    absl::StatusOr<std::vector<ProductChoice>> parsed = ParseProductTable(text);
    ASSERT_FALSE(parsed.ok()) << text;
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(parsed.status().message().find(message), std::string::npos)
        << parsed.status().message();
  }
}

TEST(ProductSweepTableTest, TheCommittedTableNamesRealVariantsAndBuckets) {
  for (const ProductChoice& c : ProductTable()) {
    EXPECT_EQ(ProductRowBucket(c.row_bucket), c.row_bucket);
    EXPECT_NE(ProductVariantName(c.row_bucket, c.variant), "unknown")
        << DTypeName(c.dtype) << " rows " << c.row_bucket << " variant " << c.variant;
    if (c.row_bucket > kQuantizedMaxRows && c.variant != kF16GemmVariant) {
      EXPECT_TRUE(HasMmaProduct(c.dtype)) << DTypeName(c.dtype);
    }
  }
}

}  // namespace
}  // namespace baton::kernels::cuda
