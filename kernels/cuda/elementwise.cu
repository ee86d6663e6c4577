#include "kernels/cuda/elementwise.cuh"

#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>

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

// One block of kNormThreads per row: the sum of squares in double (as the CPU backend sums),
// then the scaling. A decode step's norm is one row: its time is the latency of two passes over
// the row, so each thread takes few values, four at a time where the row allows (dim a
// multiple of 4; the rows then start 16-byte aligned), and the block adds its sums with warp
// shuffles and one round through shared memory.
constexpr int kNormThreads = 1024;

// With a residual (AddRmsNorm), the first pass adds it into x (each thread its own values)
// before summing: the add and the norm in one pass over the row.
template <bool kVectors>
__global__ void __launch_bounds__(kNormThreads)
    RmsNormKernel(float* x, const float* residual, const float* weight, int64_t dim, float eps,
                  float* y) {
  float* xr = x + blockIdx.x * dim;
  const float* rr = residual != nullptr ? residual + blockIdx.x * dim : nullptr;
  float* yr = y + blockIdx.x * dim;
  const int64_t n = kVectors ? dim / 4 : dim;
  double sum = 0.0;
#pragma unroll 4
  for (int64_t j = threadIdx.x; j < n; j += kNormThreads) {
    if constexpr (kVectors) {
      float4 v = reinterpret_cast<const float4*>(xr)[j];
      if (rr != nullptr) {
        const float4 r = reinterpret_cast<const float4*>(rr)[j];
        v = make_float4(__fadd_rn(v.x, r.x), __fadd_rn(v.y, r.y), __fadd_rn(v.z, r.z),
                        __fadd_rn(v.w, r.w));
        reinterpret_cast<float4*>(xr)[j] = v;
      }
      sum += static_cast<double>(__fmul_rn(v.x, v.x)) + static_cast<double>(__fmul_rn(v.y, v.y)) +
             static_cast<double>(__fmul_rn(v.z, v.z)) + static_cast<double>(__fmul_rn(v.w, v.w));
    } else {
      float v = xr[j];
      if (rr != nullptr) {
        v = __fadd_rn(v, rr[j]);
        xr[j] = v;
      }
      sum += static_cast<double>(__fmul_rn(v, v));
    }
  }
  for (int offset = 16; offset > 0; offset /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
  __shared__ double warp_sums[kNormThreads / 32];
  __shared__ float shared_scale;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) warp_sums[warp] = sum;
  __syncthreads();
  if (warp == 0) {
    double total = warp_sums[lane];  // kNormThreads / 32 == 32 warps
    for (int offset = 16; offset > 0; offset /= 2) {
      total += __shfl_xor_sync(0xffffffffu, total, offset);
    }
    const float mean = static_cast<float>(total / static_cast<double>(dim));
    if (lane == 0) shared_scale = 1.0f / sqrtf(mean + eps);
  }
  __syncthreads();
  const float scale = shared_scale;
#pragma unroll 4
  for (int64_t j = threadIdx.x; j < n; j += kNormThreads) {
    if constexpr (kVectors) {
      const float4 v = reinterpret_cast<const float4*>(xr)[j];
      const float4 w = reinterpret_cast<const float4*>(weight)[j];
      reinterpret_cast<float4*>(yr)[j] =
          make_float4(__fmul_rn(__fmul_rn(v.x, scale), w.x), __fmul_rn(__fmul_rn(v.y, scale), w.y),
                      __fmul_rn(__fmul_rn(v.z, scale), w.z), __fmul_rn(__fmul_rn(v.w, scale), w.w));
    } else {
      yr[j] = __fmul_rn(__fmul_rn(xr[j], scale), weight[j]);
    }
  }
}
static_assert(kNormThreads == 32 * 32, "the second reduction is one warp over the warps' sums");

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
  const float theta_extrap = __fdiv_rn(theta_base, ff);
  float theta = __fmul_rn(rope.freq_scale, theta_extrap);
  if (rope.ext_factor != 0.0f) {  // YaRN's ramp, as the host reference mixes it (no FMA)
    const float y = __fdiv_rn(__fsub_rn(static_cast<float>(i), rope.corr_dims[0]),
                              fmaxf(0.001f, __fsub_rn(rope.corr_dims[1], rope.corr_dims[0])));
    const float ramp_mix =
        __fmul_rn(__fsub_rn(1.0f, fminf(1.0f, fmaxf(0.0f, y))), rope.ext_factor);
    theta = __fadd_rn(__fmul_rn(theta, __fsub_rn(1.0f, ramp_mix)),
                      __fmul_rn(theta_extrap, ramp_mix));
  }
  float s, c;
  sincosf(theta, &s, &c);
  s = __fmul_rn(s, rope.mscale);
  c = __fmul_rn(c, rope.mscale);
  float* xh = x + head * head_dim;
  const int64_t i0 = rope.neox ? i : 2 * i;
  const int64_t i1 = rope.neox ? i + half : 2 * i + 1;
  const float x0 = xh[i0], x1 = xh[i1];
  xh[i0] = __fmaf_rn(x0, c, -__fmul_rn(x1, s));
  xh[i1] = __fmaf_rn(x0, s, __fmul_rn(x1, c));
}

__global__ void SwigluOaiMulKernel(const float* gate, const float* up, int64_t n, float* y) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) {
    const float g = fminf(gate[i], 7.0f);
    const float u = fminf(fmaxf(up[i], -7.0f), 7.0f);
    y[i] = g / (1.0f + expf(1.702f * -g)) * (u + 1.0f);
  }
}

__global__ void SiluMulKernel(const float* gate, const float* up, int64_t n, float* y) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) {
    const float g = gate[i];
    y[i] = g / (1.0f + expf(-g)) * up[i];
  }
}

// GGML's CPU GELU: the f16 rounding of gate, its GELU (tanh approximation) in f32 rounded to f16
// (reference::GeluF16), 0 at or below -10 and gate itself at or above 10.
__global__ void GeluMulKernel(const float* gate, const float* up, int64_t n, float* y) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float g = gate[i];
  float gelu;
  if (g <= -10.0f) {
    gelu = 0.0f;
  } else if (g >= 10.0f) {
    gelu = g;
  } else {
    constexpr float kGeluCoefA = 0.044715f;
    constexpr float kSqrt2OverPi = 0.79788456080286535587989211986876f;
    const float x = __half2float(__float2half_rn(g));
    gelu = __half2float(
        __float2half_rn(0.5f * x * (1.0f + tanhf(kSqrt2OverPi * x * (1.0f + kGeluCoefA * x * x)))));
  }
  y[i] = __fmul_rn(gelu, up[i]);
}

__global__ void WeightedSumOfRowsKernel(const float* x, const int64_t* rows,
                                        const float* weights, int64_t total, int64_t k,
                                        int64_t dim, float* out) {
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= total) return;
  const int64_t i = idx / dim, e = idx % dim;
  float acc = __fmul_rn(weights[i * k], x[rows[i * k] * dim + e]);
  for (int64_t j = 1; j < k; ++j) {
    acc = __fadd_rn(acc, __fmul_rn(weights[i * k + j], x[rows[i * k + j] * dim + e]));
  }
  out[idx] = acc;
}

__global__ void ScaleKernel(float* x, float s, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) x[i] = __fmul_rn(x[i], s);
}

}  // namespace

void LaunchWeightedSumOfRows(const float* x, const int64_t* rows, const float* weights, int64_t n,
                             int64_t k, int64_t dim, float* out, cudaStream_t stream) {
  if (n * dim == 0) return;
  WeightedSumOfRowsKernel<<<Blocks(n * dim), kThreads, 0, stream>>>(x, rows, weights, n * dim, k,
                                                                   dim, out);
  BATON_CUDA_CHECK_LAUNCH();
}

void LaunchScale(float* x, float s, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  ScaleKernel<<<Blocks(n), kThreads, 0, stream>>>(x, s, n);
  BATON_CUDA_CHECK_LAUNCH();
}

void LaunchSwigluOaiMul(const float* gate, const float* up, int64_t count, float* y,
                        cudaStream_t stream) {
  if (count == 0) return;
  SwigluOaiMulKernel<<<Blocks(count), kThreads, 0, stream>>>(gate, up, count, y);
  BATON_CUDA_CHECK_LAUNCH();
}

void LaunchGeluMul(const float* gate, const float* up, int64_t count, float* y,
                   cudaStream_t stream) {
  if (count == 0) return;
  GeluMulKernel<<<Blocks(count), kThreads, 0, stream>>>(gate, up, count, y);
  BATON_CUDA_CHECK_LAUNCH();
}

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
  // Without a residual the kernel only reads x.
  LaunchAddRmsNorm(const_cast<float*>(x), nullptr, weight, n, dim, eps, y, stream);
}

void LaunchAddRmsNorm(float* x, const float* residual, const float* weight, int64_t n,
                      int64_t dim, float eps, float* y, cudaStream_t stream) {
  if (n == 0) return;
  const auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  const unsigned rows = static_cast<unsigned>(n);
  if (dim % 4 == 0 && aligned(x) && aligned(residual) && aligned(weight) && aligned(y)) {
    RmsNormKernel<true><<<rows, kNormThreads, 0, stream>>>(x, residual, weight, dim, eps, y);
  } else {
    RmsNormKernel<false><<<rows, kNormThreads, 0, stream>>>(x, residual, weight, dim, eps, y);
  }
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
