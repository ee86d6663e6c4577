// The quantized products' kernel variants and which one each shape runs: a table the sweep
// (`baton bench products`, product_sweep.h) measures and writes on the GPU machine. Plain C++,
// so the table's logic is tested without a GPU.
//
// Up to kQuantizedMaxRows activation rows (decode) a variant is a matrix-vector kernel
// (quantized_matvec.cuh): `rows_per_cta` weight rows, each walked by `threads_per_row` threads
// (one to eight warps) that split its columns (split-K within the CTA) and add their sums in
// shared memory. Few long rows (the 1,024-row K/V projections) want many threads per row to fill
// the GPU; many short rows want a warp each.
//
// Past that (decode batches, prefill) a variant is a tensor-core tile shape
// (quantized_matmul.cuh, int8 mma on the split blocks), or kF16GemmVariant: the matrix
// dequantized to f16 and multiplied by cuBLAS. Without a measured entry the f16 GEMM runs, as
// before the tensor-core kernel existed.
//
// Thread-safety: constants and pure functions.
#ifndef BATON_KERNELS_CUDA_PRODUCT_VARIANTS_H_
#define BATON_KERNELS_CUDA_PRODUCT_VARIANTS_H_

#include <array>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
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

// The matrix-vector kernels' activation-row counts: n rounds up to one of them. Up to
// kQuantizedMaxRows rows (decode batches, speculative verification) take them.
inline constexpr std::array<int, 4> kMatVecRowBuckets = {1, 2, 4, 8};
inline constexpr int64_t kQuantizedMaxRows = 8;

// The weight types with a tensor-core product: those whose 32-value groups are affine in int8
// (mma_warp_tile.h); Q6_K is not.
inline constexpr std::array<DType, 4> kMmaTypes = {DType::kQ4_0, DType::kQ4_1, DType::kQ8_0,
                                                   DType::kQ4_K};
bool HasMmaProduct(DType dtype);

// A tensor-core variant: a CTA of `warps` warps stacked over the weight rows, each warp
// 16 tiles_m rows x 8 tiles_n activation rows.
struct MmaVariant {
  std::string_view name;
  int warps = 0;
  int tiles_m = 0;
  int tiles_n = 0;
};

inline constexpr std::array<MmaVariant, 5> kMmaVariants = {{
    {"mma-w4-m1n2", 4, 1, 2},  // 64 rows x 16 tokens a CTA
    {"mma-w4-m1n4", 4, 1, 4},  // 64 x 32
    {"mma-w4-m2n4", 4, 2, 4},  // 128 x 32
    {"mma-w4-m2n8", 4, 2, 8},  // 128 x 64
    {"mma-w2-m1n8", 2, 1, 8},  // 32 x 64
}};

// Past kQuantizedMaxRows rows: the f16 GEMM, a choice like the tensor-core variants.
inline constexpr int kF16GemmVariant = -2;

// Every product's row buckets: the matrix-vector kernels' and then the larger products'. n
// rounds up to one (past the last, the last).
inline constexpr std::array<int, 12> kProductRowBuckets = {1,   2,   4,   8,    16,   32,
                                                           64,  128, 256, 512, 2048, 8192};
int ProductRowBucket(int64_t n);

// The name of a variant for n activation rows: a matrix-vector variant up to kQuantizedMaxRows,
// a tensor-core one or "f16-gemm" past that; "unknown" for an index out of range.
std::string_view ProductVariantName(int64_t n, int variant);

// Matrices of up to kShortRows rows (K/V projections, small models) are "short".
inline constexpr int64_t kShortRows = 2048;
enum class MatrixHeight { kShort, kTall };
inline MatrixHeight HeightOf(int64_t n_rows) {
  return n_rows <= kShortRows ? MatrixHeight::kShort : MatrixHeight::kTall;
}

struct ProductChoice {
  DType dtype;
  MatrixHeight height;
  int row_bucket;  // one of kProductRowBuckets
  int variant;     // up to kQuantizedMaxRows rows an index into kMatVecVariants; past them an
                   // index into kMmaVariants, or kF16GemmVariant
};

// The sweep's choices, measured on an H200 (docs/GPU.md has the sweep's table).
std::span<const ProductChoice> ProductTable();

// A table written as the sweep prints it (product_sweep_table.h's FormatTableSource), one
// entry a line: `{DType::kQ4_0, MatrixHeight::kTall, 32, 1},` with anything after `//`
// ignored, blank lines skipped. INVALID_ARGUMENT naming the line for a type without quantized
// products, an unknown height, a row count that is not a bucket, a variant that does not exist
// for it, or a tensor-core variant for a type without one. What BATON_CUDA_PRODUCT_TABLE names
// (kernels/backend_factory.h), so that a run on the GPU machine uses the table its own sweep
// just chose.
absl::StatusOr<std::vector<ProductChoice>> ParseProductTable(std::string_view text);

// The variant for n activation rows times a matrix of n_rows rows of `dtype`: the table's
// entry, else kDefaultMatVecVariant up to kQuantizedMaxRows rows and kF16GemmVariant past them.
// A tensor-core entry for a type without a tensor-core product also gives kF16GemmVariant.
inline constexpr int kDefaultMatVecVariant = 2;
int ChooseProductVariant(std::span<const ProductChoice> table, DType dtype, int64_t n_rows,
                         int64_t n);

}  // namespace baton::kernels::cuda

#endif  // BATON_KERNELS_CUDA_PRODUCT_VARIANTS_H_
