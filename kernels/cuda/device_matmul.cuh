// y [n, n_rows] = x [n, n_cols] · Wᵀ on the GPU, for a weight matrix in device memory in any
// type kernels/cpu/dequantize.h knows (GGML block layouts, weight_chunks.cuh).
//
// Two strategies, chosen by the number of activation rows:
// - n <= kGemvMaxRows (decode): a matrix-vector kernel reads the quantized weights directly, one
//   warp per output row, so each weight byte crosses the memory bus once per step.
// - larger n (prefill, big batches): W is dequantized to f16 into a scratch buffer (2 bytes per
//   weight, the largest matrix's worth, reused by every matrix), x is rounded to f16, and cuBLAS
//   multiplies them with f32 accumulation (f32 weights: an f32 GEMM, no rounding). The
//   dequantization reads the weights once and writes 2 bytes per weight: memory time, small
//   against the GEMM's compute once n is in the hundreds.
// Results are within rounding of the CPU backend's; unlike it, not batch-invariant (cuBLAS picks
// its algorithm by shape, and the two strategies round differently).
//
// Thread-safety: one thread at a time (it owns a cuBLAS handle and scratch buffers).
#ifndef BATON_KERNELS_CUDA_DEVICE_MATMUL_CUH_
#define BATON_KERNELS_CUDA_DEVICE_MATMUL_CUH_

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "kernels/dtype.h"

namespace baton::kernels::cuda {

constexpr int64_t kGemvMaxRows = 8;

// Device memory that grows to the largest size asked for.
class ScratchBuffer {
 public:
  ScratchBuffer() = default;
  ScratchBuffer(const ScratchBuffer&) = delete;
  ScratchBuffer& operator=(const ScratchBuffer&) = delete;
  ~ScratchBuffer();
  // At least `bytes` of device memory (contents undefined); waits for the device when it grows.
  void* Reserve(size_t bytes);

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

class DeviceMatMul {
 public:
  explicit DeviceMatMul(cudaStream_t stream);
  DeviceMatMul(const DeviceMatMul&) = delete;
  DeviceMatMul& operator=(const DeviceMatMul&) = delete;
  ~DeviceMatMul();

  // w: n_rows rows of n_cols elements of `dtype`, each RowBytes(dtype, n_cols) long, in device
  // memory; x [n, n_cols] and y [n, n_rows] f32 device memory.
  void Run(DType dtype, const void* w, int64_t n_rows, int64_t n_cols, const float* x, int64_t n,
           float* y);

 private:
  void RunGemv(DType dtype, const void* w, int64_t n_rows, int64_t n_cols, const float* x,
               int64_t n, float* y);
  void RunGemm(DType dtype, const void* w, int64_t n_rows, int64_t n_cols, const float* x,
               int64_t n, float* y);

  cudaStream_t stream_;
  int sm_count_ = 1;  // the device's multiprocessors
  cublasHandle_t cublas_ = nullptr;
  ScratchBuffer weights_f16_;      // f16 [n_rows, n_cols]
  ScratchBuffer activations_f16_;  // f16 [n, n_cols]
};

// Row-major y [n, n_rows] f32 = x [n, n_cols] · Wᵀ with W [n_rows, n_cols] and x both of
// `operands` (CUDA_R_16F or CUDA_R_32F), f32 accumulation: the one cuBLAS call the backend's
// GEMMs make, and the one the benchmark times alone (device_probes.h).
cublasStatus_t GemmWithWeightRows(cublasHandle_t cublas, cudaDataType operands, const void* w,
                                  const void* x, float* y, int64_t n_rows, int64_t n_cols,
                                  int64_t n);

// out [n_rows, n_cols] f16 (raw halves) = W dequantized.
void LaunchDequantizeToF16(DType dtype, const void* w, int64_t n_rows, int64_t n_cols,
                           uint16_t* out, cudaStream_t stream);

}  // namespace baton::kernels::cuda

#endif  // BATON_KERNELS_CUDA_DEVICE_MATMUL_CUH_
