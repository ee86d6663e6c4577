#include "kernels/cuda/quantized_matvec.cuh"

#include <string>
#include <type_traits>

#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda/launch_helpers.cuh"
#include "kernels/cuda/product_variants.h"
#include "kernels/cuda/quantized_dots.cuh"

namespace baton::kernels::cuda {
namespace {

constexpr int kQuantizeThreads = 256;

// One warp per 32 values of x.
__global__ void QuantizeActivationsKernel(const float* x, int64_t n_blocks, int8_t* q,
                                          float2* ds) {
  const int64_t block = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (block >= n_blocks) return;  // whole warps
  const float v = x[block * 32 + lane];
  float amax = fabsf(v);
  for (int offset = 16; offset > 0; offset /= 2) {
    amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, offset));
  }
  const float d = amax / 127.0f;
  const int qi = amax == 0.0f ? 0 : __float2int_rn(v / d);
  int sum = qi;
  for (int offset = 16; offset > 0; offset /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
  q[block * 32 + lane] = static_cast<int8_t>(qi);
  if (lane == 0) ds[block] = make_float2(d, d * static_cast<float>(sum));
}

size_t Q8ValuesBytes(int64_t n, int64_t n_cols) {
  return (static_cast<size_t>(n * n_cols) + 255) / 256 * 256;
}

// A CTA takes kRowsPerCta consecutive weight rows, kThreadsPerRow threads each; thread t of a
// row takes its units t, t + kThreadsPerRow, ..., for all n rows of x. The row's threads then
// add their sums: within each warp, then across the row's warps in shared memory.
template <typename Dot, int kThreadsPerRow, int kRowsPerCta, int kN>
__global__ void __launch_bounds__(kThreadsPerRow* kRowsPerCta)
    QuantizedMatVecKernel(SplitView w, int64_t bits_row, int64_t headers_row, int64_t n_rows,
                          int64_t units_row, Q8Rows x, int n, float* y) {
  constexpr int kWarpsPerRow = kThreadsPerRow / 32;
  const int in_cta = threadIdx.x / kThreadsPerRow, t = threadIdx.x % kThreadsPerRow;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kRowsPerCta + in_cta;
  // A row past the end repeats the last one (its sum is not stored).
  const int64_t read_row = row < n_rows ? row : n_rows - 1;
  const uint8_t* bits = w.bits + read_row * bits_row;
  const uint8_t* headers = w.headers + read_row * headers_row;
  float acc[kN];
#pragma unroll
  for (int i = 0; i < kN; ++i) acc[i] = 0.0f;
#pragma unroll 4
  for (int64_t u = t; u < units_row; u += kThreadsPerRow) {
    Dot::template Accumulate<kN>(bits, headers, u, x, n, acc);
  }
  __shared__ float partial[kRowsPerCta][kWarpsPerRow][kN];
  const int warp_in_row = t / 32, lane = t % 32;
#pragma unroll
  for (int i = 0; i < kN; ++i) {
    const float sum = WarpSum(acc[i]);
    if (lane == 0) partial[in_cta][warp_in_row][i] = sum;
  }
  __syncthreads();
  if (t < kN && t < n && row < n_rows) {
    float sum = 0.0f;
#pragma unroll
    for (int k = 0; k < kWarpsPerRow; ++k) sum += partial[in_cta][k][t];
    y[t * n_rows + row] = sum;
  }
}

template <typename Dot, int kThreadsPerRow, int kRowsPerCta>
void LaunchVariant(const SplitGeometry& g, const void* w, int64_t n_rows, int64_t n_cols,
                   const Q8Rows& x, int64_t n, float* y, cudaStream_t stream) {
  const int64_t blocks_row = n_cols / g.block_values;
  const SplitView view = SplitViewOf(g, w, n_rows * blocks_row);
  const int64_t units_row = blocks_row * Dot::kUnitsPerBlock;
  const unsigned grid = BlocksFor(n_rows, kRowsPerCta);
  constexpr int kThreads = kThreadsPerRow * kRowsPerCta;
  const int rows = static_cast<int>(n);
  const int64_t bits_row = blocks_row * g.bits_bytes, headers_row = blocks_row * g.header_bytes();
  auto launch = [&](auto bucket) {
    QuantizedMatVecKernel<Dot, kThreadsPerRow, kRowsPerCta, decltype(bucket)::value>
        <<<grid, kThreads, 0, stream>>>(view, bits_row, headers_row, n_rows, units_row, x, rows,
                                        y);
  };
  static_assert(kMatVecRowBuckets.size() == 4, "one case per bucket");
  switch (ProductRowBucket(n)) {
    case 1: launch(std::integral_constant<int, 1>{}); break;
    case 2: launch(std::integral_constant<int, 2>{}); break;
    case 4: launch(std::integral_constant<int, 4>{}); break;
    default: launch(std::integral_constant<int, 8>{}); break;
  }
}

template <typename Dot>
void LaunchForDot(const SplitGeometry& g, int variant, const void* w, int64_t n_rows,
                  int64_t n_cols, const Q8Rows& x, int64_t n, float* y, cudaStream_t stream) {
  static_assert(kMatVecVariants.size() == 4, "one case per variant");
  switch (variant) {
    case 0: LaunchVariant<Dot, 32, 4>(g, w, n_rows, n_cols, x, n, y, stream); break;
    case 1: LaunchVariant<Dot, 64, 2>(g, w, n_rows, n_cols, x, n, y, stream); break;
    case 2: LaunchVariant<Dot, 128, 1>(g, w, n_rows, n_cols, x, n, y, stream); break;
    default: LaunchVariant<Dot, 256, 1>(g, w, n_rows, n_cols, x, n, y, stream); break;
  }
}

}  // namespace

size_t Q8RowsBytes(int64_t n, int64_t n_cols) {
  return Q8ValuesBytes(n, n_cols) + static_cast<size_t>(n * (n_cols / 32)) * sizeof(float2);
}

Q8Rows LaunchQuantizeActivations(const float* x, int64_t n, int64_t n_cols, void* scratch,
                                 cudaStream_t stream) {
  auto* base = static_cast<uint8_t*>(scratch);
  Q8Rows rows{.q = reinterpret_cast<int8_t*>(base),
              .ds = reinterpret_cast<float2*>(base + Q8ValuesBytes(n, n_cols)),
              .n_cols = n_cols};
  const int64_t n_blocks = n * (n_cols / 32);
  QuantizeActivationsKernel<<<BlocksFor(n_blocks * 32, kQuantizeThreads), kQuantizeThreads, 0,
                              stream>>>(x, n_blocks, reinterpret_cast<int8_t*>(base),
                                        const_cast<float2*>(rows.ds));
  BATON_CUDA_CHECK_LAUNCH();
  return rows;
}

void LaunchQuantizedMatVec(DType dtype, int variant, const void* w, int64_t n_rows,
                           int64_t n_cols, const Q8Rows& x, int64_t n, float* y,
                           cudaStream_t stream) {
  const std::optional<SplitGeometry> g = SplitGeometryOf(dtype);
  if (!g.has_value() || n < 1 || n > kQuantizedMaxRows || n_cols % g->block_values != 0) {
    const std::string reason = "no quantized matrix-vector kernel for " +
                               std::string(DTypeName(dtype)) + " with " + std::to_string(n) +
                               " rows of " + std::to_string(n_cols);
    CudaFailed("LaunchQuantizedMatVec", reason.c_str(), __FILE__, __LINE__);
  }
  auto launch = [&](auto dot) {
    LaunchForDot<decltype(dot)>(*g, variant, w, n_rows, n_cols, x, n, y, stream);
  };
  switch (dtype) {
    case DType::kQ4_0: launch(DotQ4_0{}); break;
    case DType::kQ4_1: launch(DotQ4_1{}); break;
    case DType::kQ8_0: launch(DotQ8_0{}); break;
    case DType::kQ4_K: launch(DotQ4_K{}); break;
    default: launch(DotQ6_K{}); break;
  }
  BATON_CUDA_CHECK_LAUNCH();
}

}  // namespace baton::kernels::cuda
