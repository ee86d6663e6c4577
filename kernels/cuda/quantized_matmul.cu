#include "kernels/cuda/quantized_matmul.cuh"

#include <string>

#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda/launch_helpers.cuh"
#include "kernels/cuda/mma.cuh"
#include "kernels/cuda/mma_warp_tile.h"
#include "kernels/cuda/product_variants.h"
#include "kernels/cuda/split_geometry.h"

namespace baton::kernels::cuda {
namespace {

// A CTA of kWarps warps takes kWarps x 16 kTilesM consecutive weight rows (blockIdx.x) times
// 8 kTilesN tokens (blockIdx.y); each warp its 16 kTilesM rows, walking the row's groups.
template <typename Groups, int kWarps, int kTilesM, int kTilesN>
__global__ void __launch_bounds__(kWarps * 32)
    QuantizedMatMulKernel(MmaProblem p, float* y) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t first_row = (static_cast<int64_t>(blockIdx.x) * kWarps + warp) * 16 * kTilesM;
  if (first_row >= p.n_rows) return;  // the whole warp: it has no rows
  const int64_t first_token = static_cast<int64_t>(blockIdx.y) * 8 * kTilesN;
  using Tile = MmaWarpTile<Groups, kTilesM, kTilesN>;
  Tile tile(p, first_row, first_token, lane);
  const int64_t groups = tile.groups();
  for (int64_t k = 0; k < groups; ++k) {
    typename Tile::Operands ops;
    tile.Load(k, &ops);
#pragma unroll
    for (int m = 0; m < kTilesM; ++m) {
#pragma unroll
      for (int n = 0; n < kTilesN; ++n) {
        int32_t c[4];
        MmaI8(ops.a[m], ops.b[n], c);
        tile.Accumulate(ops, m, n, c);
      }
    }
  }
  tile.Store(y);
}

template <typename Groups, int kWarps, int kTilesM, int kTilesN>
void LaunchTiles(const MmaProblem& p, float* y, cudaStream_t stream) {
  const dim3 grid(BlocksFor(p.n_rows, kWarps * 16 * kTilesM), BlocksFor(p.n, 8 * kTilesN));
  QuantizedMatMulKernel<Groups, kWarps, kTilesM, kTilesN><<<grid, kWarps * 32, 0, stream>>>(p, y);
}

template <typename Groups>
void LaunchVariant(int variant, const MmaProblem& p, float* y, cudaStream_t stream) {
  static_assert(kMmaVariants.size() == 5, "one case per variant");
  switch (variant) {
    case 0: LaunchTiles<Groups, 4, 1, 2>(p, y, stream); break;
    case 1: LaunchTiles<Groups, 4, 1, 4>(p, y, stream); break;
    case 2: LaunchTiles<Groups, 4, 2, 4>(p, y, stream); break;
    case 3: LaunchTiles<Groups, 4, 2, 8>(p, y, stream); break;
    default: LaunchTiles<Groups, 2, 1, 8>(p, y, stream); break;
  }
}

}  // namespace

void LaunchQuantizedMatMul(DType dtype, int variant, const void* w, int64_t n_rows,
                           int64_t n_cols, const Q8Rows& x, int64_t n, float* y,
                           cudaStream_t stream) {
  const std::optional<SplitGeometry> g = SplitGeometryOf(dtype);
  if (!HasMmaProduct(dtype) || !g.has_value() || n < 1 || n_rows < 1 ||
      n_cols % g->block_values != 0 || variant < 0 ||
      variant >= static_cast<int>(kMmaVariants.size())) {
    const std::string reason = "no tensor-core product for " + std::string(DTypeName(dtype)) +
                               " with " + std::to_string(n) + " rows of " +
                               std::to_string(n_cols) + ", variant " + std::to_string(variant);
    CudaFailed("LaunchQuantizedMatMul", reason.c_str(), __FILE__, __LINE__);
  }
  const int64_t n_blocks = n_rows * (n_cols / g->block_values);
  const SplitView view = SplitViewOf(*g, w, n_blocks);
  const MmaProblem p{.bits = view.bits, .headers = view.headers, .n_rows = n_rows,
                     .n_cols = n_cols, .bits_bytes = g->bits_bytes,
                     .header_bytes = g->header_bytes(), .block_values = g->block_values,
                     .q = x.q, .ds = reinterpret_cast<const float*>(x.ds), .n = n};
  switch (dtype) {
    case DType::kQ4_0: LaunchVariant<MmaGroupsQ4_0>(variant, p, y, stream); break;
    case DType::kQ4_1: LaunchVariant<MmaGroupsQ4_1>(variant, p, y, stream); break;
    case DType::kQ8_0: LaunchVariant<MmaGroupsQ8_0>(variant, p, y, stream); break;
    default: LaunchVariant<MmaGroupsQ4_K>(variant, p, y, stream); break;
  }
  BATON_CUDA_CHECK_LAUNCH();
}

}  // namespace baton::kernels::cuda
