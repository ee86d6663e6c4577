// The CUDA backend's element-wise and row-wise operations between the layers' products, as
// launches on a stream. Pointers are device memory; shapes as kernels/backend.h states them.
// Thread-safety: launches only; the stream orders them.
#ifndef BATON_KERNELS_CUDA_ELEMENTWISE_CUH_
#define BATON_KERNELS_CUDA_ELEMENTWISE_CUH_

#include <cuda_runtime.h>

#include <cstdint>

namespace baton::kernels::cuda {

// x [n] += y [n]
void LaunchAdd(float* x, const float* y, int64_t n, cudaStream_t stream);
// x [n_rows, dim] += bias [dim]
void LaunchAddRowBias(float* x, const float* bias, int64_t n_rows, int64_t dim,
                      cudaStream_t stream);
// x [n] = f16(x), -0 becoming +0.
void LaunchRoundToF16(float* x, int64_t n, cudaStream_t stream);
// out [n, dim] = x [rows[i]]
void LaunchGatherRows(const float* x, const int64_t* rows, int64_t n, int64_t dim, float* out,
                      cudaStream_t stream);
// y [n, dim] = x / sqrt(mean(x²) + eps) * weight, per row; y may alias x.
void LaunchRmsNorm(const float* x, const float* weight, int64_t n, int64_t dim, float eps,
                   float* y, cudaStream_t stream);
// x [n, dim] += residual [n, dim] (none when null), then y = RmsNorm(x); y may alias residual.
void LaunchAddRmsNorm(float* x, const float* residual, const float* weight, int64_t n,
                      int64_t dim, float eps, float* y, cudaStream_t stream);
// Rotates x [n, n_heads, head_dim] in place by positions [n] (device memory).
struct RopeLaunch {
  int32_t n_dims;
  float theta_scale;  // freq_base^(-2 / n_dims)
  float freq_scale;
  bool neox;
  const float* freq_factors;  // [n_dims / 2] device memory, or null
  float ext_factor;           // RopeParams: YaRN's ramp where != 0
  float mscale;               // cos and sin's factor (YaRN's magnitude scale, else attn_factor)
  float corr_dims[2] = {0.0f, 0.0f};  // RopeYarnCorrDims
};
void LaunchRope(float* x, int64_t n, int64_t n_heads, int64_t head_dim, const int32_t* positions,
                const RopeLaunch& rope, cudaStream_t stream);
// y [count] = silu(gate) * up; y may alias gate.
void LaunchSiluMul(const float* gate, const float* up, int64_t count, float* y,
                   cudaStream_t stream);
// out [n] = f16(in [n]) as raw halves.
// Backend::WeightedSumOfRows; rows and weights in device memory.
void LaunchWeightedSumOfRows(const float* x, const int64_t* rows, const float* weights, int64_t n,
                             int64_t k, int64_t dim, float* out, cudaStream_t stream);
// x [n] *= s.
void LaunchScale(float* x, float s, int64_t n, cudaStream_t stream);
// y [count] = swiglu_oai(gate, up) as Backend::SwigluOaiMul says; y may alias gate.
void LaunchSwigluOaiMul(const float* gate, const float* up, int64_t count, float* y,
                        cudaStream_t stream);
// y [count] = gelu(gate) * up as Backend::GeluMul says (GGML's CPU GELU through f16).
void LaunchGeluMul(const float* gate, const float* up, int64_t count, float* y,
                   cudaStream_t stream);
void LaunchF32ToF16(const float* in, int64_t n, uint16_t* out, cudaStream_t stream);

}  // namespace baton::kernels::cuda

#endif  // BATON_KERNELS_CUDA_ELEMENTWISE_CUH_
