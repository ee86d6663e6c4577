// Speed probes of a CUDA GPU, for the benchmarks' ratios (bench/engine_bench.h): the memory
// bandwidth a decode step is bounded by, and what cuBLAS alone takes for a prefill's GEMMs.
// Plain C++: callers need no CUDA headers.
//
// Thread-safety: each call uses the device on its own (its own stream and buffers).
#ifndef BATON_KERNELS_CUDA_DEVICE_PROBES_H_
#define BATON_KERNELS_CUDA_DEVICE_PROBES_H_

#include <cstdint>
#include <span>

#include "absl/status/statusor.h"

namespace baton::kernels::cuda {

// Bytes per second a device-to-device copy of 1 GiB moves (read plus written), best of 5: the
// HBM roofline's bandwidth.
absl::StatusOr<double> MeasureCopyBandwidth(int device);

// A weight matrix's shape: y [n, n_rows] = x [n, n_cols] · Wᵀ.
struct GemmShape {
  int64_t n_rows;
  int64_t n_cols;
};

// Seconds cuBLAS takes for one f16 GEMM of each shape with n activation rows (f16 operands, f32
// accumulation and output, as the CUDA backend calls it), best of 3; nothing else in the time.
absl::StatusOr<double> TimeF16Gemms(int device, std::span<const GemmShape> shapes, int64_t n);

}  // namespace baton::kernels::cuda

#endif  // BATON_KERNELS_CUDA_DEVICE_PROBES_H_
