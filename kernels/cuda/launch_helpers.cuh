// What the CUDA backend's kernels and launches share: the grid for n threads' worth of work, and
// a warp's sum.
#ifndef BATON_KERNELS_CUDA_LAUNCH_HELPERS_CUH_
#define BATON_KERNELS_CUDA_LAUNCH_HELPERS_CUH_

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

namespace baton::kernels::cuda {

// Blocks of `threads` threads covering n items, one thread each (at least one block).
inline unsigned BlocksFor(int64_t n, int threads) {
  return static_cast<unsigned>(std::max<int64_t>(1, (n + threads - 1) / threads));
}

// The sum of v over the 32 lanes of the calling warp, in every lane.
__device__ __forceinline__ float WarpSum(float v) {
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

}  // namespace baton::kernels::cuda

#endif  // BATON_KERNELS_CUDA_LAUNCH_HELPERS_CUH_
