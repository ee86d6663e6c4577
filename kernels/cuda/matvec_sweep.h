// The decode products' sweep, run on the GPU machine (`baton bench matvec`): every variant of
// the quantized matrix-vector kernel (matvec_variants.h), and the exact f32 kernel as the
// baseline, on each weight type and matrix shape of a model, for 1, 2, 4 and 8 activation rows:
// checked against the CPU backend's scalar reference, then timed with the weights cold in L2
// (copies rotated, as a decode step streams the whole model between two reads of a matrix).
// matvec_sweep_table.h chooses and writes the table from what this measures. Plain C++.
//
// Thread-safety: uses the device on its own stream; one sweep at a time per device.
#ifndef BATON_KERNELS_CUDA_MATVEC_SWEEP_H_
#define BATON_KERNELS_CUDA_MATVEC_SWEEP_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/cuda/matvec_sweep_table.h"
#include "kernels/dtype.h"

namespace baton::kernels::cuda {

struct MatVecSweepShape {
  std::string name;  // e.g. "llama-3-8b ffn_down"
  int64_t n_rows = 0;
  int64_t n_cols = 0;
};

// The distinct matrix shapes of a decode step of Llama-3-8B and of the default model
// (SmolLM2-135M).
std::vector<MatVecSweepShape> Llama3_8bMatVecShapes();
std::vector<MatVecSweepShape> SmolLm2MatVecShapes();

struct MatVecSweepOptions {
  int device = 0;
  std::vector<DType> dtypes;             // each with a quantized kernel (HasQuantizedMatVec)
  std::vector<MatVecSweepShape> shapes;  // a type skips the shapes its blocks do not divide
  std::vector<int64_t> batch_rows = {1, 2, 4, 8};
  int repeats = 20;
  double tolerance = 5e-2;  // max |error| / rms for the quantized variants
};

// One measurement per (type, shape, rows, variant), the baseline included.
absl::StatusOr<std::vector<MatVecMeasurement>> RunMatVecSweep(const MatVecSweepOptions& options);

}  // namespace baton::kernels::cuda

#endif  // BATON_KERNELS_CUDA_MATVEC_SWEEP_H_
