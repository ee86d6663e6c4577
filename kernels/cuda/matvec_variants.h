// The decode products' kernel variants (quantized_matvec.cuh) and which one each shape runs: a
// table the sweep (`baton bench matvec`, matvec_sweep.h) measures and writes on the GPU machine.
// Plain C++, so the table's logic is tested without a GPU.
//
// A variant is how a CTA splits the work: `rows_per_cta` weight rows, each walked by
// `threads_per_row` threads (one to eight warps) that split its columns (split-K within the CTA)
// and add their sums in shared memory. Few long rows (the 1,024-row K/V projections) want many
// threads per row to fill the GPU; many short rows want a warp each.
//
// Thread-safety: constants and pure functions.
#ifndef BATON_KERNELS_CUDA_MATVEC_VARIANTS_H_
#define BATON_KERNELS_CUDA_MATVEC_VARIANTS_H_

#include <array>
#include <cstdint>
#include <span>
#include <string_view>

#include "kernels/dtype.h"

namespace baton::kernels::cuda {

// The weight types with quantized decode products: the ones RegisterWeights keeps split
// (split_blocks.cuh) and quantized_dots.cuh multiplies.
inline constexpr std::array<DType, 5> kQuantizedMatVecTypes = {
    DType::kQ4_0, DType::kQ4_1, DType::kQ8_0, DType::kQ4_K, DType::kQ6_K};
bool HasQuantizedMatVec(DType dtype);

struct MatVecVariant {
  std::string_view name;
  int threads_per_row = 0;  // a multiple of 32
  int rows_per_cta = 0;
};

inline constexpr std::array<MatVecVariant, 4> kMatVecVariants = {{
    {"w1x4", 32, 4},    // a warp per row, four rows per CTA
    {"w2x2", 64, 2},
    {"w4x1", 128, 1},
    {"w8x1", 256, 1},
}};

// The activation-row counts the kernels are built for: n rounds up to one of them. Up to
// kQuantizedMaxRows rows (decode batches, speculative verification) take the quantized
// products; more take the f16 GEMM, which the sweep measured faster from 16 rows on (each row
// of x costs these kernels as much as the weights do; a tensor-core kernel is what comes next).
inline constexpr std::array<int, 4> kMatVecRowBuckets = {1, 2, 4, 8};
inline constexpr int64_t kQuantizedMaxRows = 8;
int MatVecRowBucket(int64_t n);  // n in [1, kQuantizedMaxRows]

// Matrices of up to kShortRows rows (K/V projections, small models) are "short".
inline constexpr int64_t kShortRows = 2048;
enum class MatrixHeight { kShort, kTall };
inline MatrixHeight HeightOf(int64_t n_rows) {
  return n_rows <= kShortRows ? MatrixHeight::kShort : MatrixHeight::kTall;
}

struct MatVecChoice {
  DType dtype;
  MatrixHeight height;
  int row_bucket;  // one of kMatVecRowBuckets
  int variant;     // index into kMatVecVariants
};

// The sweep's choices, measured on an H200 (docs/GPU.md has the sweep's table).
std::span<const MatVecChoice> MatVecTable();

// The variant for n activation rows times a matrix of n_rows rows of `dtype`: the table's
// entry, else kDefaultMatVecVariant.
inline constexpr int kDefaultMatVecVariant = 2;
int ChooseMatVecVariant(std::span<const MatVecChoice> table, DType dtype, int64_t n_rows,
                        int64_t n);

}  // namespace baton::kernels::cuda

#endif  // BATON_KERNELS_CUDA_MATVEC_VARIANTS_H_
