// The quantized products' sweep, run on the GPU machine (`baton bench products`): on each
// weight type and matrix shape of a model, for each activation-row count,
//   - up to 8 rows: every variant of the matrix-vector kernel (quantized_matvec.cuh), and the
//     exact f32 kernel as the baseline;
//   - past 8 rows: every tensor-core variant (quantized_matmul.cuh), the f16 GEMM (dequantize,
//     then cuBLAS), and cuBLAS alone on f16 weights as the reference;
// each checked against the CPU backend's scalar reference, then timed with the weights cold in
// L2 (copies rotated, as a step streams the whole model between two reads of a matrix).
// product_sweep_table.h chooses and writes the table from what this measures. Plain C++.
//
// Thread-safety: uses the device on its own stream; one sweep at a time per device.
#ifndef BATON_KERNELS_CUDA_PRODUCT_SWEEP_H_
#define BATON_KERNELS_CUDA_PRODUCT_SWEEP_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/cuda/product_sweep_table.h"
#include "kernels/dtype.h"

namespace baton::kernels::cuda {

struct ProductSweepShape {
  std::string name;  // e.g. "llama-3-8b ffn_down"
  int64_t n_rows = 0;
  int64_t n_cols = 0;
};

// The distinct matrix shapes of a step of Llama-3-8B and of the default model (SmolLM2-135M).
// The output matrix ("... output") is measured up to kMaxOutputRows activation rows only (a
// prefill computes the logits of its last token alone).
std::vector<ProductSweepShape> Llama3_8bProductShapes();
std::vector<ProductSweepShape> SmolLm2ProductShapes();

inline constexpr int64_t kMaxOutputRows = 256;

struct ProductSweepOptions {
  int device = 0;
  std::vector<DType> dtypes;             // each with a quantized kernel (HasQuantizedMatVec)
  std::vector<ProductSweepShape> shapes;  // a type skips the shapes its blocks do not divide
  std::vector<int64_t> batch_rows = {1, 2, 4, 8};  // any counts from 1 to 8192
  int repeats = 20;  // past 256 rows fewer, down to 3 (the products take milliseconds there)
  double tolerance = 5e-2;  // max |error| / rms for the quantized variants
};

// One measurement per (type, shape, rows, variant), the baseline included.
absl::StatusOr<std::vector<ProductMeasurement>> RunProductSweep(const ProductSweepOptions& options);

}  // namespace baton::kernels::cuda

#endif  // BATON_KERNELS_CUDA_PRODUCT_SWEEP_H_
