// What the quantized products' sweep measured, and the table it chooses from that: for each
// class of shapes (weight type, short or tall matrix, activation-row bucket), the variant with
// the least total time over the class's shapes among those correct on every one of them (past
// 8 rows the f16 GEMM is one of the contenders). Plain C++:
// the GPU measures (product_sweep.h), this decides and writes, and its tests run on any machine.
//
// Thread-safety: pure functions.
#ifndef BATON_KERNELS_CUDA_PRODUCT_SWEEP_TABLE_H_
#define BATON_KERNELS_CUDA_PRODUCT_SWEEP_TABLE_H_

#include <span>
#include <string>
#include <vector>

#include "kernels/cuda/product_variants.h"
#include "kernels/dtype.h"

namespace baton::kernels::cuda {

// Measured beside the variants as references, never chosen by the table: the exact f32 kernel
// on the weights as stored (the first version's decode products; up to 8 rows), and cuBLAS
// alone on f16 weights already dequantized (past 8 rows: what a product of the same shape costs
// the tensor cores when nothing is quantized).
inline constexpr int kBaselineVariant = -1;
inline constexpr int kCublasAloneVariant = -3;
bool IsReferenceOnly(int variant);

struct ProductMeasurement {
  std::string shape;  // e.g. "llama-3-8b ffn_down"
  DType dtype = DType::kF32;
  int64_t n_rows = 0;
  int64_t n_cols = 0;
  int64_t n = 0;           // activation rows
  int variant = 0;         // as ProductChoice::variant, or a reference-only one
  double seconds = 0.0;    // one product, best of the repeats
  double max_error = 0.0;  // max |y - reference| / rms(reference)
  double tolerance = 0.0;  // what max_error may reach

  bool correct() const;
  std::string variant_name() const;
};

// The fastest correct variant per class of the measured shapes; a class where no variant is
// correct on every shape gets no entry (it falls back to ChooseProductVariant's default).
std::vector<ProductChoice> ChooseFastestCorrect(std::span<const ProductMeasurement> measured);

// The classes of the measured shapes for which no variant was correct on every shape.
std::vector<std::string> ClassesWithoutACorrectVariant(
    std::span<const ProductMeasurement> measured);

// A markdown table: shape, type, rows, variant, microseconds, GB/s of weights read, the share
// of `copy_bandwidth` (bytes/s) that is, TFLOP/s, the share of cuBLAS alone on the same shape
// (its time over this one's, where it was measured), the error and whether it passed; the
// chosen variants marked.
std::string FormatSweepMarkdown(std::span<const ProductMeasurement> measured,
                                std::span<const ProductChoice> chosen, double copy_bandwidth);

// The table as the C++ entries of product_variants.cc's kTable.
std::string FormatTableSource(std::span<const ProductChoice> chosen);

}  // namespace baton::kernels::cuda

#endif  // BATON_KERNELS_CUDA_PRODUCT_SWEEP_TABLE_H_
