#include "kernels/cuda/device_matmul.cuh"

#include <cuda_fp16.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <string>

#include "kernels/cpu/dequantize.h"
#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda/elementwise.cuh"
#include "kernels/cuda/launch_helpers.cuh"
#include "kernels/cuda/product_variants.h"
#include "kernels/cuda/quantized_matmul.cuh"
#include "kernels/cuda/quantized_matvec.cuh"
#include "kernels/cuda/split_blocks.cuh"
#include "kernels/cuda/weight_chunks.cuh"

namespace baton::kernels::cuda {
namespace {

constexpr int kGemvWarps = 4;

// Rows ending in a partial chunk (plain types): one warp per output row r; lane l takes chunks
// l, l + 32, ... of the row and every x row, then the tail element by element.
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

// The matrix-vector product for rows of whole chunks. A block of kTiledWarps warps takes
// kTiledRowsPerWarp rows per warp and walks the columns in tiles of up to tile_chunks_max chunks
// (the whole row where x fits the shared-memory budget): the block stages x's tile in shared
// memory once, transposed (xs[i][c][j], rows padded to 33 so that neither the staging nor the
// reads collide on banks), and lane l multiplies chunks l, l + 32, ... of the tile, for each of
// its rows, with x's values from there. Each weight byte is read once, by one lane, next to its
// neighbours' bytes; x comes from shared memory, not once per row from L1.
constexpr int kTiledWarps = 8;
constexpr int kTiledRowsPerWarp = 2;
constexpr int kPaddedChunk = kChunk + 1;
constexpr size_t kGemvSharedBudget = 96 * 1024;

// Chunks per tile for n rows of x: as many as the budget holds, a multiple of 32, all of a row's
// when it fits.
int TileChunksFor(int64_t n, int64_t n_chunks) {
  const int64_t fit = static_cast<int64_t>(kGemvSharedBudget) / (n * kPaddedChunk * 4);
  if (fit >= n_chunks) return static_cast<int>(n_chunks);
  return static_cast<int>(std::max<int64_t>(32, fit / 32 * 32));
}

// x's tile of chunks [tile, tile + tile_chunks) staged into xs.
__device__ __forceinline__ void StageTile(const float* x, int n, int64_t n_cols, int64_t tile,
                                          int tile_chunks, int tile_chunks_max, float* xs) {
  const int tile_values = tile_chunks * kChunk;
  for (int idx = threadIdx.x; idx < n * tile_values; idx += blockDim.x) {
    const int i = idx / tile_values, e = idx % tile_values;
    xs[(i * tile_chunks_max + e / kChunk) * kPaddedChunk + e % kChunk] =
        x[i * n_cols + tile * kChunk + e];
  }
}

// Blocks stride over the groups of kTiledWarps * kTiledRowsPerWarp rows; where x fits in one
// tile it is staged once per block, for all the block's groups.
template <typename Loader>
__global__ void GemvTiledKernel(const uint8_t* w, int64_t row_bytes, int64_t n_rows,
                                int64_t n_cols, const float* x, int n, int tile_chunks_max,
                                float* y) {
  extern __shared__ float xs[];  // [n][tile_chunks_max][kPaddedChunk]
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t n_chunks = n_cols / kChunk;
  const bool one_tile = tile_chunks_max >= n_chunks;
  if (one_tile) {
    StageTile(x, n, n_cols, 0, static_cast<int>(n_chunks), tile_chunks_max, xs);
    __syncthreads();
  }
  constexpr int kRowsPerGroup = kTiledWarps * kTiledRowsPerWarp;
  const int64_t n_groups = (n_rows + kRowsPerGroup - 1) / kRowsPerGroup;
  for (int64_t group = blockIdx.x; group < n_groups; group += gridDim.x) {
    const int64_t first_row = group * kRowsPerGroup + warp * kTiledRowsPerWarp;
    float acc[kTiledRowsPerWarp][kGemvMaxRows];
#pragma unroll
    for (int r = 0; r < kTiledRowsPerWarp; ++r) {
#pragma unroll
      for (int i = 0; i < kGemvMaxRows; ++i) acc[r][i] = 0.0f;
    }
    for (int64_t tile = 0; tile < n_chunks; tile += tile_chunks_max) {
      const int tile_chunks =
          n_chunks - tile < tile_chunks_max ? static_cast<int>(n_chunks - tile) : tile_chunks_max;
      if (!one_tile) {
        __syncthreads();  // the previous tile has been read
        StageTile(x, n, n_cols, tile, tile_chunks, tile_chunks_max, xs);
        __syncthreads();
      }
      for (int c = lane; c < tile_chunks; c += 32) {
        float v[kTiledRowsPerWarp][kChunk];
#pragma unroll
        for (int r = 0; r < kTiledRowsPerWarp; ++r) {
          // A row past the end repeats the last one (its sum is not stored).
          const int64_t row = first_row + r < n_rows ? first_row + r : n_rows - 1;
          Loader::Load(w + row * row_bytes, tile + c, v[r]);
        }
#pragma unroll
        for (int i = 0; i < kGemvMaxRows; ++i) {
          if (i >= n) break;
          const float* xc = xs + (i * tile_chunks_max + c) * kPaddedChunk;
#pragma unroll
          for (int r = 0; r < kTiledRowsPerWarp; ++r) {
            float sum = 0.0f;
#pragma unroll
            for (int j = 0; j < kChunk; ++j) sum = fmaf(v[r][j], xc[j], sum);
            acc[r][i] += sum;
          }
        }
      }
    }
#pragma unroll
    for (int r = 0; r < kTiledRowsPerWarp; ++r) {
#pragma unroll
      for (int i = 0; i < kGemvMaxRows; ++i) {
        if (i >= n) break;
        const float sum = WarpSum(acc[r][i]);
        if (lane == 0 && first_row + r < n_rows) y[i * n_rows + first_row + r] = sum;
      }
    }
  }
}

// Lets GemvTiledKernel<Loader> take kGemvSharedBudget of shared memory on the current device,
// once per device.
template <typename Loader>
void AllowGemvSharedBudget() {
  static std::atomic<uint64_t> done_devices{0};  // bit d: device d
  int device = 0;
  BATON_CUDA_CHECK(cudaGetDevice(&device));
  const uint64_t bit = device < 64 ? uint64_t{1} << device : 0;
  if (bit != 0 && (done_devices.load() & bit) != 0) return;
  BATON_CUDA_CHECK(cudaFuncSetAttribute(GemvTiledKernel<Loader>,
                                        cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        static_cast<int>(kGemvSharedBudget)));
  done_devices.fetch_or(bit);
}

// One thread per chunk of a quantized row. The block's chunks are contiguous in `out`, written
// through shared memory (StageChunkAsHalves, WriteStagedChunks).
constexpr int kDequantizeThreads = 256;

template <typename Loader>
__global__ void DequantizeChunksKernel(const uint8_t* w, int64_t row_bytes, int64_t n_chunks_row,
                                       int64_t n_chunks_total, __half* out) {
  __shared__ __align__(16) __half staged[kDequantizeThreads * kChunk];
  const int64_t first = static_cast<int64_t>(blockIdx.x) * kDequantizeThreads;
  const int64_t idx = first + threadIdx.x;
  if (idx < n_chunks_total) {
    float v[kChunk];
    Loader::Load(w + (idx / n_chunks_row) * row_bytes, idx % n_chunks_row, v);
    StageChunkAsHalves(v, staged + threadIdx.x * kChunk);
  }
  __syncthreads();
  const int64_t chunks = min(static_cast<int64_t>(kDequantizeThreads), n_chunks_total - first);
  WriteStagedChunks(staged, chunks, kDequantizeThreads, out + first * kChunk);
}
// One thread per element of a plain-typed row (rows of any length).
template <typename Loader>
__global__ void DequantizeElementsKernel(const uint8_t* w, int64_t row_bytes, int64_t n_cols,
                                         int64_t total, __half* out) {
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= total) return;
  out[idx] = __float2half_rn(Loader::LoadOne(w + (idx / n_cols) * row_bytes, idx % n_cols));
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
      DequantizeChunksKernel<Loader>
          <<<BlocksFor(total, kDequantizeThreads), kDequantizeThreads, 0, stream>>>(
              bytes, row_bytes, chunks_row, total, half_out);
    }
  });
  if (!known) Unsupported(dtype);
  BATON_CUDA_CHECK_LAUNCH();
}

DeviceMatMul::DeviceMatMul(cudaStream_t stream, std::span<const ProductChoice> table)
    : stream_(stream), table_(table) {
  int device = 0;
  BATON_CUDA_CHECK(cudaGetDevice(&device));
  BATON_CUDA_CHECK(cudaDeviceGetAttribute(&sm_count_, cudaDevAttrMultiProcessorCount, device));
  BATON_CUBLAS_CHECK(Cublas().Create(&cublas_));
  BATON_CUBLAS_CHECK(Cublas().SetStream(cublas_, stream_));
}

DeviceMatMul::~DeviceMatMul() {
  if (cublas_ != nullptr) Cublas().Destroy(cublas_);
}

void DeviceMatMul::Run(const DeviceMatrix& w, const float* x, int64_t n, float* y) {
  RunMany({&w, 1}, x, n, {&y, 1});
}

DeviceMatMul::Plan DeviceMatMul::PlanFor(const DeviceMatrix& w, int64_t n) const {
  if (!w.split) return {n <= kGemvMaxRows ? Strategy::kGemv : Strategy::kGemm, 0};
  const int variant = ChooseProductVariant(table_, w.dtype, w.n_rows, n);
  if (n <= kQuantizedMaxRows) return {Strategy::kMatVec, variant};
  if (variant == kF16GemmVariant) return {Strategy::kGemm, 0};
  return {Strategy::kMma, variant};
}

const Q8Rows& DeviceMatMul::Quantized(const float* x, int64_t n, int64_t n_cols,
                                      std::optional<Q8Rows>* made) {
  if (!made->has_value() || (*made)->n_cols != n_cols) {
    *made = LaunchQuantizeActivations(
        x, n, n_cols, activations_q8_.Reserve(Q8RowsBytes(n, n_cols)), stream_);
  }
  return **made;
}

void DeviceMatMul::RunMany(std::span<const DeviceMatrix> ws, const float* x, int64_t n,
                           std::span<float* const> ys) {
  if (n == 0) return;
  std::optional<Q8Rows> quantized;  // x in 8 bits, made once for the products that take it
  for (size_t k = 0; k < ws.size(); ++k) {
    const DeviceMatrix& w = ws[k];
    if (w.n_rows == 0) continue;
    const Plan plan = PlanFor(w, n);
    switch (plan.strategy) {
      case Strategy::kMatVec:
        LaunchQuantizedMatVec(w.dtype, plan.variant, w.data, w.n_rows, w.n_cols,
                              Quantized(x, n, w.n_cols, &quantized), n, ys[k], stream_);
        break;
      case Strategy::kMma:
        LaunchQuantizedMatMul(w.dtype, plan.variant, w.data, w.n_rows, w.n_cols,
                              Quantized(x, n, w.n_cols, &quantized), n, ys[k], stream_);
        break;
      case Strategy::kGemv: RunGemv(w, x, n, ys[k]); break;
      case Strategy::kGemm: RunGemm(w, x, n, ys[k]); break;
    }
  }
}

void DeviceMatMul::RunGemv(const DeviceMatrix& w, const float* x, int64_t n, float* y) {
  const auto* bytes = static_cast<const uint8_t*>(w.data);
  const int64_t n_rows = w.n_rows, n_cols = w.n_cols;
  const int64_t row_bytes = RowBytes(w.dtype, n_cols);
  const bool whole_chunks = n_cols % kChunk == 0;
  const bool known = WithChunkLoader(w.dtype, [&](auto loader) {
    using Loader = decltype(loader);
    if (whole_chunks) {
      const int tile_chunks = TileChunksFor(n, n_cols / kChunk);
      const size_t shared = static_cast<size_t>(n) * tile_chunks * kPaddedChunk * sizeof(float);
      AllowGemvSharedBudget<Loader>();
      // Two blocks per multiprocessor at most (their registers and shared memory fill it).
      const int64_t groups = (n_rows + kTiledWarps * kTiledRowsPerWarp - 1) /
                             (kTiledWarps * kTiledRowsPerWarp);
      const auto blocks = static_cast<unsigned>(std::min<int64_t>(groups, 2 * sm_count_));
      GemvTiledKernel<Loader><<<blocks, kTiledWarps * 32, shared, stream_>>>(
          bytes, row_bytes, n_rows, n_cols, x, static_cast<int>(n), tile_chunks, y);
    } else {
      GemvKernel<Loader><<<BlocksFor(n_rows, kGemvWarps), kGemvWarps * 32, 0, stream_>>>(
          bytes, row_bytes, n_rows, n_cols, x, static_cast<int>(n), y);
    }
  });
  if (!known) Unsupported(w.dtype);
  BATON_CUDA_CHECK_LAUNCH();
}

// Row-major y [n, n_rows] = x [n, n_cols] · Wᵀ is, column-major, Y (n_rows x n) = Wᵀ X with W
// seen as (n_cols x n_rows) and X as (n_cols x n).
cublasStatus_t GemmWithWeightRows(cublasHandle_t cublas, cudaDataType operands, const void* w,
                                  const void* x, float* y, int64_t n_rows, int64_t n_cols,
                                  int64_t n) {
  const float alpha = 1.0f, beta = 0.0f;
  const int rows = static_cast<int>(n_rows), cols = static_cast<int>(n_cols);
  return Cublas().GemmEx(cublas, CUBLAS_OP_T, CUBLAS_OP_N, rows, static_cast<int>(n), cols, &alpha,
                      w, operands, cols, x, operands, cols, &beta, y, CUDA_R_32F, rows,
                      CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
}

void DeviceMatMul::RunGemm(const DeviceMatrix& w, const float* x, int64_t n, float* y) {
  const int64_t n_rows = w.n_rows, n_cols = w.n_cols;
  if (w.dtype == DType::kF32) {
    BATON_CUBLAS_CHECK(GemmWithWeightRows(cublas_, CUDA_R_32F, w.data, x, y, n_rows, n_cols, n));
    return;
  }
  const void* w16 = w.data;
  if (w.dtype != DType::kF16) {
    auto* out = static_cast<uint16_t*>(
        weights_f16_.Reserve(static_cast<size_t>(n_rows * n_cols) * sizeof(uint16_t)));
    if (w.split) {
      LaunchDequantizeSplitToF16(w.dtype, w.data, n_rows, n_cols, out, stream_);
    } else {
      LaunchDequantizeToF16(w.dtype, w.data, n_rows, n_cols, out, stream_);
    }
    w16 = out;
  }
  auto* x16 = static_cast<uint16_t*>(
      activations_f16_.Reserve(static_cast<size_t>(n * n_cols) * sizeof(uint16_t)));
  LaunchF32ToF16(x, n * n_cols, x16, stream_);
  BATON_CUBLAS_CHECK(GemmWithWeightRows(cublas_, CUDA_R_16F, w16, x16, y, n_rows, n_cols, n));
}

}  // namespace baton::kernels::cuda
