// The element-wise operations between a layer's products, as the CPU backends compute them: the
// portable definitions here, and SIMD versions per level (IsaKernels) that give the same bits.
// Stateless; thread-safe.
#ifndef BATON_KERNELS_CPU_ELEMENTWISE_H_
#define BATON_KERNELS_CPU_ELEMENTWISE_H_

#include <cstdint>

namespace baton::kernels {

// x[0..n) += y[0..n) (Backend::Add).
using AddFn = void (*)(float* x, const float* y, int64_t n);
void AddScalar(float* x, const float* y, int64_t n);

// Backend::RoundToF16's rounding of v[0..n), in place: adding and subtracting 1.5 * 2^(e + 13),
// where 2^e is the value's binade (at least f16's smallest normal binade, 2^-14), leaves it
// rounded by the f32 addition to a multiple of 2^(e - 10), f16's spacing there. Past f16's range
// a value keeps its exponent; -0 becomes +0.
using RoundToF16UnboundedFn = void (*)(float* v, int64_t n);
void RoundToF16UnboundedScalar(float* v, int64_t n);

// One row of RmsNorm: y[0..dim) = (x * (1 / sqrt(mean + eps))) * weight, where mean is the sum of
// the f32 squares, taken in double in 8 lanes (lane j % 8) then added pairwise (lane l + 4 into l,
// then l + 2, then l + 1), over dim, rounded to f32. The lanes are independent chains: a single
// chain of double additions took 1 us of a 576-wide row.
using RmsNormRowFn = void (*)(const float* x, const float* weight, int64_t dim, float eps,
                              float* y);
void RmsNormRowScalar(const float* x, const float* weight, int64_t dim, float eps, float* y);

// RmsNorm's scale 1 / sqrt(mean + eps) from its 8 lane sums (the pairwise additions above).
float RmsNormScale(double (&lanes)[8], int64_t dim, float eps);

}  // namespace baton::kernels

#endif  // BATON_KERNELS_CPU_ELEMENTWISE_H_
