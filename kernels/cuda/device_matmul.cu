#include "kernels/cuda/device_matmul.cuh"

#include <cuda_fp16.h>

#include <algorithm>
#include <cstdlib>
#include <string>

#include "kernels/cpu/dequantize.h"
#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda/elementwise.cuh"
#include "kernels/cuda/weight_chunks.cuh"

namespace baton::kernels::cuda {
namespace {

constexpr int kGemvWarps = 4;

__device__ __forceinline__ float WarpSum(float v) {
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

// One warp per output row r; lane l takes chunks l, l + 32, ... of the row and every x row.
template <typename Loader>
__global__ void GemvKernel(const uint8_t* w, int64_t row_bytes, int64_t n_rows, int64_t n_cols,
                           const float* x, int n, float* y) {
  const int lane = threadIdx.x % 32;
  const int64_t r = static_cast<int64_t>(blockIdx.x) * kGemvWarps + threadIdx.x / 32;
  if (r >= n_rows) return;
  const uint8_t* row = w + r * row_bytes;
  const int64_t n_chunks = n_cols / kChunk;
  float acc[kGemvMaxRows];
#pragma unroll
  for (int i = 0; i < kGemvMaxRows; ++i) acc[i] = 0.0f;
  float v[kChunk];
  for (int64_t c = lane; c < n_chunks; c += 32) {
    Loader::Load(row, c, v);
#pragma unroll
    for (int i = 0; i < kGemvMaxRows; ++i) {
      if (i >= n) break;
      const float* xi = x + i * n_cols + c * kChunk;
      float s = 0.0f;
#pragma unroll
      for (int j = 0; j < kChunk; ++j) s = fmaf(v[j], xi[j], s);
      acc[i] += s;
    }
  }
  if constexpr (Loader::kPlain) {
    for (int64_t k = n_chunks * kChunk + lane; k < n_cols; k += 32) {
      const float wk = Loader::LoadOne(row, k);
#pragma unroll
      for (int i = 0; i < kGemvMaxRows; ++i) {
        if (i < n) acc[i] = fmaf(wk, x[i * n_cols + k], acc[i]);
      }
    }
  }
#pragma unroll
  for (int i = 0; i < kGemvMaxRows; ++i) {
    if (i >= n) break;
    const float sum = WarpSum(acc[i]);
    if (lane == 0) y[i * n_rows + r] = sum;
  }
}

// One thread per chunk of a quantized row.
template <typename Loader>
__global__ void DequantizeChunksKernel(const uint8_t* w, int64_t row_bytes, int64_t n_chunks_row,
                                       int64_t n_chunks_total, __half* out) {
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= n_chunks_total) return;
  const int64_t r = idx / n_chunks_row, c = idx % n_chunks_row;
  float v[kChunk];
  Loader::Load(w + r * row_bytes, c, v);
  __half* o = out + (r * n_chunks_row + c) * kChunk;
#pragma unroll
  for (int j = 0; j < kChunk; ++j) o[j] = __float2half_rn(v[j]);
}

// One thread per element of a plain-typed row (rows of any length).
template <typename Loader>
__global__ void DequantizeElementsKernel(const uint8_t* w, int64_t row_bytes, int64_t n_cols,
                                         int64_t total, __half* out) {
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= total) return;
  out[idx] = __float2half_rn(Loader::LoadOne(w + (idx / n_cols) * row_bytes, idx % n_cols));
}

unsigned BlocksFor(int64_t n, int threads) {
  return static_cast<unsigned>(std::max<int64_t>(1, (n + threads - 1) / threads));
}

[[noreturn]] void Unsupported(DType dtype) {
  const std::string reason = "no CUDA loader for weights of type " + std::string(DTypeName(dtype));
  CudaFailed("DeviceMatMul", reason.c_str(), __FILE__, __LINE__);
}

}  // namespace

ScratchBuffer::~ScratchBuffer() {
  if (data_ != nullptr) cudaFree(data_);
}

void* ScratchBuffer::Reserve(size_t bytes) {
  if (bytes <= bytes_) return data_;
  if (data_ != nullptr) {
    BATON_CUDA_CHECK(cudaDeviceSynchronize());  // the old buffer may still be read
    BATON_CUDA_CHECK(cudaFree(data_));
  }
  data_ = nullptr;
  bytes_ = 0;
  BATON_CUDA_CHECK(cudaMalloc(&data_, bytes));
  bytes_ = bytes;
  return data_;
}

void LaunchDequantizeToF16(DType dtype, const void* w, int64_t n_rows, int64_t n_cols,
                           uint16_t* out, cudaStream_t stream) {
  const auto* bytes = static_cast<const uint8_t*>(w);
  const int64_t row_bytes = RowBytes(dtype, n_cols);
  auto* half_out = reinterpret_cast<__half*>(out);
  constexpr int kThreads = 256;
  const bool known = WithChunkLoader(dtype, [&](auto loader) {
    using Loader = decltype(loader);
    if constexpr (Loader::kPlain) {
      const int64_t total = n_rows * n_cols;
      DequantizeElementsKernel<Loader><<<BlocksFor(total, kThreads), kThreads, 0, stream>>>(
          bytes, row_bytes, n_cols, total, half_out);
    } else {
      const int64_t chunks_row = n_cols / kChunk;
      const int64_t total = n_rows * chunks_row;
      DequantizeChunksKernel<Loader><<<BlocksFor(total, kThreads), kThreads, 0, stream>>>(
          bytes, row_bytes, chunks_row, total, half_out);
    }
  });
  if (!known) Unsupported(dtype);
  BATON_CUDA_CHECK_LAUNCH();
}

DeviceMatMul::DeviceMatMul(cudaStream_t stream) : stream_(stream) {
  BATON_CUBLAS_CHECK(cublasCreate(&cublas_));
  BATON_CUBLAS_CHECK(cublasSetStream(cublas_, stream_));
}

DeviceMatMul::~DeviceMatMul() {
  if (cublas_ != nullptr) cublasDestroy(cublas_);
}

void DeviceMatMul::Run(DType dtype, const void* w, int64_t n_rows, int64_t n_cols,
                       const float* x, int64_t n, float* y) {
  if (n == 0 || n_rows == 0) return;
  if (n <= kGemvMaxRows) {
    RunGemv(dtype, w, n_rows, n_cols, x, n, y);
  } else {
    RunGemm(dtype, w, n_rows, n_cols, x, n, y);
  }
}

void DeviceMatMul::RunGemv(DType dtype, const void* w, int64_t n_rows, int64_t n_cols,
                           const float* x, int64_t n, float* y) {
  const auto* bytes = static_cast<const uint8_t*>(w);
  const int64_t row_bytes = RowBytes(dtype, n_cols);
  const bool known = WithChunkLoader(dtype, [&](auto loader) {
    using Loader = decltype(loader);
    GemvKernel<Loader><<<BlocksFor(n_rows, kGemvWarps), kGemvWarps * 32, 0, stream_>>>(
        bytes, row_bytes, n_rows, n_cols, x, static_cast<int>(n), y);
  });
  if (!known) Unsupported(dtype);
  BATON_CUDA_CHECK_LAUNCH();
}

// Row-major y [n, n_rows] = x [n, n_cols] · Wᵀ is, column-major, Y (n_rows x n) = Wᵀ X with W
// seen as (n_cols x n_rows) and X as (n_cols x n).
void DeviceMatMul::RunGemm(DType dtype, const void* w, int64_t n_rows, int64_t n_cols,
                           const float* x, int64_t n, float* y) {
  const float alpha = 1.0f, beta = 0.0f;
  if (dtype == DType::kF32) {
    BATON_CUBLAS_CHECK(cublasGemmEx(cublas_, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(n_rows),
                                    static_cast<int>(n), static_cast<int>(n_cols), &alpha, w,
                                    CUDA_R_32F, static_cast<int>(n_cols), x, CUDA_R_32F,
                                    static_cast<int>(n_cols), &beta, y, CUDA_R_32F,
                                    static_cast<int>(n_rows), CUBLAS_COMPUTE_32F,
                                    CUBLAS_GEMM_DEFAULT));
    return;
  }
  const void* w16 = w;
  if (dtype != DType::kF16) {
    auto* out = static_cast<uint16_t*>(
        weights_f16_.Reserve(static_cast<size_t>(n_rows * n_cols) * sizeof(uint16_t)));
    LaunchDequantizeToF16(dtype, w, n_rows, n_cols, out, stream_);
    w16 = out;
  }
  auto* x16 = static_cast<uint16_t*>(
      activations_f16_.Reserve(static_cast<size_t>(n * n_cols) * sizeof(uint16_t)));
  LaunchF32ToF16(x, n * n_cols, x16, stream_);
  BATON_CUBLAS_CHECK(cublasGemmEx(cublas_, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(n_rows),
                                  static_cast<int>(n), static_cast<int>(n_cols), &alpha, w16,
                                  CUDA_R_16F, static_cast<int>(n_cols), x16, CUDA_R_16F,
                                  static_cast<int>(n_cols), &beta, y, CUDA_R_32F,
                                  static_cast<int>(n_rows), CUBLAS_COMPUTE_32F,
                                  CUBLAS_GEMM_DEFAULT));
}

}  // namespace baton::kernels::cuda
