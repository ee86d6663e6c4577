#include "kernels/cuda/matvec_variants.h"

namespace baton::kernels::cuda {
namespace {

// Written from `baton bench matvec`'s "table" lines (one H200, 2026-11-28: docs/GPU.md); a
// class not listed falls back to kDefaultMatVecVariant.
constexpr MatVecChoice kTable[] = {
    {DType::kQ4_0, MatrixHeight::kShort, 1, 2},  // w4x1
    {DType::kQ4_0, MatrixHeight::kShort, 2, 2},  // w4x1
    {DType::kQ4_0, MatrixHeight::kShort, 4, 1},  // w2x2
    {DType::kQ4_0, MatrixHeight::kShort, 8, 1},  // w2x2
    {DType::kQ4_0, MatrixHeight::kTall, 1, 0},  // w1x4
    {DType::kQ4_0, MatrixHeight::kTall, 2, 0},  // w1x4
    {DType::kQ4_0, MatrixHeight::kTall, 4, 0},  // w1x4
    {DType::kQ4_0, MatrixHeight::kTall, 8, 0},  // w1x4
    {DType::kQ4_1, MatrixHeight::kShort, 1, 3},  // w8x1
    {DType::kQ4_1, MatrixHeight::kShort, 2, 1},  // w2x2
    {DType::kQ4_1, MatrixHeight::kShort, 4, 1},  // w2x2
    {DType::kQ4_1, MatrixHeight::kShort, 8, 2},  // w4x1
    {DType::kQ4_1, MatrixHeight::kTall, 1, 0},  // w1x4
    {DType::kQ4_1, MatrixHeight::kTall, 2, 0},  // w1x4
    {DType::kQ4_1, MatrixHeight::kTall, 4, 0},  // w1x4
    {DType::kQ4_1, MatrixHeight::kTall, 8, 0},  // w1x4
    {DType::kQ8_0, MatrixHeight::kShort, 1, 2},  // w4x1
    {DType::kQ8_0, MatrixHeight::kShort, 2, 1},  // w2x2
    {DType::kQ8_0, MatrixHeight::kShort, 4, 1},  // w2x2
    {DType::kQ8_0, MatrixHeight::kShort, 8, 1},  // w2x2
    {DType::kQ8_0, MatrixHeight::kTall, 1, 0},  // w1x4
    {DType::kQ8_0, MatrixHeight::kTall, 2, 0},  // w1x4
    {DType::kQ8_0, MatrixHeight::kTall, 4, 0},  // w1x4
    {DType::kQ8_0, MatrixHeight::kTall, 8, 0},  // w1x4
    {DType::kQ4_K, MatrixHeight::kShort, 1, 1},  // w2x2
    {DType::kQ4_K, MatrixHeight::kShort, 2, 1},  // w2x2
    {DType::kQ4_K, MatrixHeight::kShort, 4, 0},  // w1x4
    {DType::kQ4_K, MatrixHeight::kShort, 8, 1},  // w2x2
    {DType::kQ4_K, MatrixHeight::kTall, 1, 0},  // w1x4
    {DType::kQ4_K, MatrixHeight::kTall, 2, 0},  // w1x4
    {DType::kQ4_K, MatrixHeight::kTall, 4, 0},  // w1x4
    {DType::kQ4_K, MatrixHeight::kTall, 8, 0},  // w1x4
    {DType::kQ6_K, MatrixHeight::kShort, 1, 2},  // w4x1
    {DType::kQ6_K, MatrixHeight::kShort, 2, 1},  // w2x2
    {DType::kQ6_K, MatrixHeight::kShort, 4, 1},  // w2x2
    {DType::kQ6_K, MatrixHeight::kShort, 8, 1},  // w2x2
    {DType::kQ6_K, MatrixHeight::kTall, 1, 0},  // w1x4
    {DType::kQ6_K, MatrixHeight::kTall, 2, 0},  // w1x4
    {DType::kQ6_K, MatrixHeight::kTall, 4, 0},  // w1x4
    {DType::kQ6_K, MatrixHeight::kTall, 8, 1},  // w2x2
};

}  // namespace

bool HasQuantizedMatVec(DType dtype) {
  for (const DType t : kQuantizedMatVecTypes) {
    if (t == dtype) return true;
  }
  return false;
}

int MatVecRowBucket(int64_t n) {
  for (const int bucket : kMatVecRowBuckets) {
    if (n <= bucket) return bucket;
  }
  return kMatVecRowBuckets.back();
}

std::span<const MatVecChoice> MatVecTable() { return kTable; }

int ChooseMatVecVariant(std::span<const MatVecChoice> table, DType dtype, int64_t n_rows,
                        int64_t n) {
  const MatrixHeight height = HeightOf(n_rows);
  const int bucket = MatVecRowBucket(n);
  for (const MatVecChoice& c : table) {
    if (c.dtype == dtype && c.height == height && c.row_bucket == bucket) return c.variant;
  }
  return kDefaultMatVecVariant;
}

}  // namespace baton::kernels::cuda
