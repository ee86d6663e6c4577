#include "kernels/cuda/elementwise.cuh"

#include <cuda_fp16.h>

#include <algorithm>

#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda/launch_helpers.cuh"

namespace baton::kernels::cuda {
namespace {

constexpr int kThreads = 256;

unsigned Blocks(int64_t n) { return BlocksFor(n, kThreads); }

__global__ void AddKernel(float* x, const float* y, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) x[i] = __fadd_rn(x[i], y[i]);
}

__global__ void AddRowBiasKernel(float* x, const float* bias, int64_t total, int64_t dim) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < total) x[i] = __fadd_rn(x[i], bias[i % dim]);
}

// Within f16's range the nearest f16; past it, 11 significant bits (ties to even) and the
// exponent kept; NaN stays NaN; + 0 turns -0 into +0.
__global__ void RoundToF16Kernel(float* x, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float v = x[i];
  float rounded = v;
  if (fabsf(v) < 65520.0f) {  // rounds to a finite f16
    rounded = __half2float(__float2half_rn(v));
  } else if (isfinite(v)) {
    uint32_t bits = __float_as_uint(v);
    bits += 0x0fffu + ((bits >> 13) & 1u);
    rounded = __uint_as_float(bits & ~0x1fffu);
  }
  x[i] = __fadd_rn(rounded, 0.0f);
}

__global__ void F32ToF16Kernel(const float* in, int64_t n, __half* out) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] = __float2half_rn(in[i]);
}

__global__ void GatherRowsKernel(const float* x, const int64_t* rows, int64_t total, int64_t dim,
                                 float* out) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < total) out[i] = x[rows[i / dim] * dim + i % dim];
}

// One block per row: the sum of squares in double (as the CPU backend sums), then the scaling.
__global__ void RmsNormKernel(const float* x, const float* weight, int64_t dim, float eps,
                              float* y) {
  const float* xr = x + blockIdx.x * dim;
  float* yr = y + blockIdx.x * dim;
  double sum = 0.0;
  for (int64_t j = threadIdx.x; j < dim; j += blockDim.x) {
    sum += static_cast<double>(__fmul_rn(xr[j], xr[j]));
  }
  __shared__ double partial[kThreads];
  partial[threadIdx.x] = sum;
  __syncthreads();
  for (int stride = kThreads / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride) partial[threadIdx.x] += partial[threadIdx.x + stride];
    __syncthreads();
  }
  const float mean = static_cast<float>(partial[0] / static_cast<double>(dim));
  const float scale = 1.0f / sqrtf(mean + eps);
  for (int64_t j = threadIdx.x; j < dim; j += blockDim.x) {
    yr[j] = __fmul_rn(__fmul_rn(xr[j], scale), weight[j]);
  }
}

// One thread per (token, head, rotated pair i); the angle as the host reference computes it
// (theta_scale^i by repeated multiplication, then frequency factor and scale).
__global__ void RopeKernel(float* x, int64_t n_pairs_total, int64_t n_heads, int64_t head_dim,
                           const int32_t* positions, RopeLaunch rope) {
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= n_pairs_total) return;
  const int64_t half = rope.n_dims / 2;
  const int64_t i = idx % half;
  const int64_t head = idx / half;  // token * n_heads + h
  const int64_t t = head / n_heads;
  float theta_base = static_cast<float>(positions[t]);
  for (int64_t k = 0; k < i; ++k) theta_base = __fmul_rn(theta_base, rope.theta_scale);
  const float ff = rope.freq_factors != nullptr ? rope.freq_factors[i] : 1.0f;
  const float theta = __fmul_rn(rope.freq_scale, __fdiv_rn(theta_base, ff));
  float s, c;
  sincosf(theta, &s, &c);
  float* xh = x + head * head_dim;
  const int64_t i0 = rope.neox ? i : 2 * i;
  const int64_t i1 = rope.neox ? i + half : 2 * i + 1;
  const float x0 = xh[i0], x1 = xh[i1];
  xh[i0] = __fmaf_rn(x0, c, -__fmul_rn(x1, s));
  xh[i1] = __fmaf_rn(x0, s, __fmul_rn(x1, c));
}

__global__ void SiluMulKernel(const float* gate, const float* up, int64_t n, float* y) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) {
    const float g = gate[i];
    y[i] = g / (1.0f + expf(-g)) * up[i];
  }
}

}  // namespace

void LaunchAdd(float* x, const float* y, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  AddKernel<<<Blocks(n), kThreads, 0, stream>>>(x, y, n);
  BATON_CUDA_CHECK_LAUNCH();
}

void LaunchAddRowBias(float* x, const float* bias, int64_t n_rows, int64_t dim,
                      cudaStream_t stream) {
  if (n_rows * dim == 0) return;
  AddRowBiasKernel<<<Blocks(n_rows * dim), kThreads, 0, stream>>>(x, bias, n_rows * dim, dim);
  BATON_CUDA_CHECK_LAUNCH();
}

void LaunchRoundToF16(float* x, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  RoundToF16Kernel<<<Blocks(n), kThreads, 0, stream>>>(x, n);
  BATON_CUDA_CHECK_LAUNCH();
}

void LaunchF32ToF16(const float* in, int64_t n, uint16_t* out, cudaStream_t stream) {
  if (n == 0) return;
  F32ToF16Kernel<<<Blocks(n), kThreads, 0, stream>>>(in, n, reinterpret_cast<__half*>(out));
  BATON_CUDA_CHECK_LAUNCH();
}

void LaunchGatherRows(const float* x, const int64_t* rows, int64_t n, int64_t dim, float* out,
                      cudaStream_t stream) {
  if (n * dim == 0) return;
  GatherRowsKernel<<<Blocks(n * dim), kThreads, 0, stream>>>(x, rows, n * dim, dim, out);
  BATON_CUDA_CHECK_LAUNCH();
}

void LaunchRmsNorm(const float* x, const float* weight, int64_t n, int64_t dim, float eps,
                   float* y, cudaStream_t stream) {
  if (n == 0) return;
  RmsNormKernel<<<static_cast<unsigned>(n), kThreads, 0, stream>>>(x, weight, dim, eps, y);
  BATON_CUDA_CHECK_LAUNCH();
}

void LaunchRope(float* x, int64_t n, int64_t n_heads, int64_t head_dim, const int32_t* positions,
                const RopeLaunch& rope, cudaStream_t stream) {
  const int64_t total = n * n_heads * (rope.n_dims / 2);
  if (total == 0) return;
  RopeKernel<<<Blocks(total), kThreads, 0, stream>>>(x, total, n_heads, head_dim, positions, rope);
  BATON_CUDA_CHECK_LAUNCH();
}

void LaunchSiluMul(const float* gate, const float* up, int64_t count, float* y,
                   cudaStream_t stream) {
  if (count == 0) return;
  SiluMulKernel<<<Blocks(count), kThreads, 0, stream>>>(gate, up, count, y);
  BATON_CUDA_CHECK_LAUNCH();
}

}  // namespace baton::kernels::cuda
