// y [n, n_rows] = x [n, n_cols] · Wᵀ on the GPU, for a weight matrix in device memory in any
// type kernels/cpu/dequantize.h knows (GGML block layouts, weight_chunks.cuh), as the file
// stores it or split (split_blocks.cuh: Q4_0, Q4_1, Q8_0, Q4_K, Q6_K, as RegisterWeights keeps
// them unless exact products are asked for).
//
// Four strategies, by the number of activation rows, the layout and the sweep's table
// (product_variants.h):
// - n <= kQuantizedMaxRows (8) on a split matrix (decode): x quantized to 8 bits once, then a
//   kernel that reads each weight byte once with wide loads and multiplies it with every row in
//   integer dot products (quantized_matvec.cuh), its variant chosen per shape by the table.
//   Within the activations' 8-bit rounding of the exact product.
// - more rows on a split matrix where the table chooses a tensor-core variant: x quantized
//   once, int8 mma on the split blocks (quantized_matmul.cuh), the same rounding.
// - n <= kGemvMaxRows on a stored matrix: a matrix-vector kernel reads the quantized weights
//   directly and multiplies in f32 (exact weights, exact x), one warp per output row.
// - otherwise (prefill, big batches, where the table has no tensor-core entry): W is dequantized
//   to f16 into a scratch buffer (2 bytes per weight, the largest matrix's worth, reused by
//   every matrix), x is rounded to f16, and cuBLAS multiplies them with f32 accumulation (f32
//   weights: an f32 GEMM, no rounding). The dequantization reads the weights once and writes 2
//   bytes per weight: memory time, small against the GEMM's compute once n is in the hundreds.
// Results are within rounding of the CPU backend's; unlike it, not batch-invariant (cuBLAS picks
// its algorithm by shape, and the strategies round differently).
//
// Thread-safety: one thread at a time (it owns a cuBLAS handle and scratch buffers).
#ifndef BATON_KERNELS_CUDA_DEVICE_MATMUL_CUH_
#define BATON_KERNELS_CUDA_DEVICE_MATMUL_CUH_

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>

#include "kernels/cuda/product_variants.h"
#include "kernels/cuda/q8_rows.h"
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

// A weight matrix in device memory: n_rows rows of n_cols elements of `dtype`, as the file stores
// them (each row RowBytes(dtype, n_cols) long) or split (SplitMatrixBytes).
struct DeviceMatrix {
  DType dtype = DType::kF32;
  const void* data = nullptr;
  int64_t n_rows = 0;
  int64_t n_cols = 0;
  bool split = false;
};

class DeviceMatMul {
 public:
  // `table` chooses the quantized products' variants (the sweep passes its own).
  explicit DeviceMatMul(cudaStream_t stream,
                        std::span<const ProductChoice> table = ProductTable());
  DeviceMatMul(const DeviceMatMul&) = delete;
  DeviceMatMul& operator=(const DeviceMatMul&) = delete;
  ~DeviceMatMul();

  // x [n, w.n_cols] and y [n, w.n_rows] f32 device memory.
  void Run(const DeviceMatrix& w, const float* x, int64_t n, float* y);
  // Run(ws[k], x, n, ys[k]) for every k, x quantized once where the products share it.
  void RunMany(std::span<const DeviceMatrix> ws, const float* x, int64_t n,
               std::span<float* const> ys);

  // Its cuBLAS handle, on its stream (the sweep times cuBLAS alone with it).
  cublasHandle_t cublas() const { return cublas_; }

 private:
  enum class Strategy { kMatVec, kMma, kGemv, kGemm };
  struct Plan {
    Strategy strategy;
    int variant;  // kMatVec: into kMatVecVariants; kMma: into kMmaVariants
  };
  Plan PlanFor(const DeviceMatrix& w, int64_t n) const;
  // x [n, n_cols] quantized into activations_q8_, once per RunMany (`made` holds it).
  const Q8Rows& Quantized(const float* x, int64_t n, int64_t n_cols,
                          std::optional<Q8Rows>* made);
  void RunGemv(const DeviceMatrix& w, const float* x, int64_t n, float* y);
  void RunGemm(const DeviceMatrix& w, const float* x, int64_t n, float* y);

  cudaStream_t stream_;
  std::span<const ProductChoice> table_;
  int sm_count_ = 1;  // the device's multiprocessors
  cublasHandle_t cublas_ = nullptr;
  ScratchBuffer weights_f16_;      // f16 [n_rows, n_cols]
  ScratchBuffer activations_f16_;  // f16 [n, n_cols]
  ScratchBuffer activations_q8_;   // Q8Rows of x [n, n_cols]
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
