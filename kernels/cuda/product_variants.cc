#include "kernels/cuda/product_variants.h"

#include <algorithm>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace baton::kernels::cuda {
namespace {

// Written from `baton bench products`' "table" lines. The matrix-vector entries (1 to 8 rows):
// one H200, 2026-11-28 (docs/GPU.md). The tensor-core kernel (past 8 rows) has not run on a GPU
// yet: until a sweep measures it, those classes are absent and take the f16 GEMM.
constexpr ProductChoice kTable[] = {
    {DType::kQ4_0, MatrixHeight::kShort, 1, 2},  // w4x1
    {DType::kQ4_0, MatrixHeight::kShort, 2, 2},  // w4x1
    {DType::kQ4_0, MatrixHeight::kShort, 4, 1},  // w2x2
    {DType::kQ4_0, MatrixHeight::kShort, 8, 1},  // w2x2
    {DType::kQ4_0, MatrixHeight::kTall, 1, 0},  // w1x4
    {DType::kQ4_0, MatrixHeight::kTall, 2, 0},  // w1x4
    {DType::kQ4_0, MatrixHeight::kTall, 4, 0},  // w1x4
    {DType::kQ4_0, MatrixHeight::kTall, 8, 0},  // w1x4
    {DType::kQ4_1, MatrixHeight::kShort, 1, 3},  // w8x1
    {DType::kQ4_1, MatrixHeight::kShort, 2, 1},  // w2x2
    {DType::kQ4_1, MatrixHeight::kShort, 4, 1},  // w2x2
    {DType::kQ4_1, MatrixHeight::kShort, 8, 2},  // w4x1
    {DType::kQ4_1, MatrixHeight::kTall, 1, 0},  // w1x4
    {DType::kQ4_1, MatrixHeight::kTall, 2, 0},  // w1x4
    {DType::kQ4_1, MatrixHeight::kTall, 4, 0},  // w1x4
    {DType::kQ4_1, MatrixHeight::kTall, 8, 0},  // w1x4
    {DType::kQ8_0, MatrixHeight::kShort, 1, 2},  // w4x1
    {DType::kQ8_0, MatrixHeight::kShort, 2, 1},  // w2x2
    {DType::kQ8_0, MatrixHeight::kShort, 4, 1},  // w2x2
    {DType::kQ8_0, MatrixHeight::kShort, 8, 1},  // w2x2
    {DType::kQ8_0, MatrixHeight::kTall, 1, 0},  // w1x4
    {DType::kQ8_0, MatrixHeight::kTall, 2, 0},  // w1x4
    {DType::kQ8_0, MatrixHeight::kTall, 4, 0},  // w1x4
    {DType::kQ8_0, MatrixHeight::kTall, 8, 0},  // w1x4
    {DType::kQ4_K, MatrixHeight::kShort, 1, 1},  // w2x2
    {DType::kQ4_K, MatrixHeight::kShort, 2, 1},  // w2x2
    {DType::kQ4_K, MatrixHeight::kShort, 4, 0},  // w1x4
    {DType::kQ4_K, MatrixHeight::kShort, 8, 1},  // w2x2
    {DType::kQ4_K, MatrixHeight::kTall, 1, 0},  // w1x4
    {DType::kQ4_K, MatrixHeight::kTall, 2, 0},  // w1x4
    {DType::kQ4_K, MatrixHeight::kTall, 4, 0},  // w1x4
    {DType::kQ4_K, MatrixHeight::kTall, 8, 0},  // w1x4
    {DType::kQ6_K, MatrixHeight::kShort, 1, 2},  // w4x1
    {DType::kQ6_K, MatrixHeight::kShort, 2, 1},  // w2x2
    {DType::kQ6_K, MatrixHeight::kShort, 4, 1},  // w2x2
    {DType::kQ6_K, MatrixHeight::kShort, 8, 1},  // w2x2
    {DType::kQ6_K, MatrixHeight::kTall, 1, 0},  // w1x4
    {DType::kQ6_K, MatrixHeight::kTall, 2, 0},  // w1x4
    {DType::kQ6_K, MatrixHeight::kTall, 4, 0},  // w1x4
    {DType::kQ6_K, MatrixHeight::kTall, 8, 1},  // w2x2
};

// One entry of a written table (the text between the braces), or why it is not one.
absl::StatusOr<ProductChoice> ParseEntry(absl::string_view entry) {
  std::vector<std::string> fields = absl::StrSplit(entry, ',');
  if (fields.size() != 4) return absl::InvalidArgumentError("wants 4 fields");
  for (std::string& f : fields) f = std::string(absl::StripAsciiWhitespace(f));
  absl::string_view type = fields[0];
  if (!absl::ConsumePrefix(&type, "DType::k")) {
    return absl::InvalidArgumentError(absl::StrCat("'", fields[0], "' is not DType::k..."));
  }
  const auto* dtype = std::find_if(
      kQuantizedMatVecTypes.begin(), kQuantizedMatVecTypes.end(), [&](DType t) {
        return absl::AsciiStrToUpper(std::string(DTypeName(t))) == absl::AsciiStrToUpper(type);
      });
  if (dtype == kQuantizedMatVecTypes.end()) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", fields[0], "' has no quantized products"));
  }
  ProductChoice c{.dtype = *dtype};
  if (fields[1] == "MatrixHeight::kShort") {
    c.height = MatrixHeight::kShort;
  } else if (fields[1] == "MatrixHeight::kTall") {
    c.height = MatrixHeight::kTall;
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("'", fields[1], "' is not MatrixHeight::kShort or kTall"));
  }
  if (!absl::SimpleAtoi(fields[2], &c.row_bucket) ||
      ProductRowBucket(c.row_bucket) != c.row_bucket) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", fields[2], "' is not one of the row buckets"));
  }
  if (fields[3] == "kF16GemmVariant") {
    c.variant = kF16GemmVariant;
  } else if (!absl::SimpleAtoi(fields[3], &c.variant)) {
    return absl::InvalidArgumentError(absl::StrCat("'", fields[3], "' is no variant"));
  }
  if (ProductVariantName(c.row_bucket, c.variant) == "unknown" ||
      (c.row_bucket > kQuantizedMaxRows && c.variant != kF16GemmVariant &&
       !HasMmaProduct(c.dtype))) {
    return absl::InvalidArgumentError(absl::StrCat("variant ", fields[3],
                                                   " does not exist for ", fields[0],
                                                   " at ", c.row_bucket, " rows"));
  }
  return c;
}

}  // namespace

absl::StatusOr<std::vector<ProductChoice>> ParseProductTable(std::string_view text) {
  std::vector<ProductChoice> table;
  int line_number = 0;
  const std::string lines(text);
  for (absl::string_view line : absl::StrSplit(lines, '\n')) {
    ++line_number;
    line = line.substr(0, line.find("//"));
    line = absl::StripAsciiWhitespace(line);
    if (line.empty()) continue;
    absl::ConsumeSuffix(&line, ",");
    if (!absl::ConsumePrefix(&line, "{") || !absl::ConsumeSuffix(&line, "}")) {
      return absl::InvalidArgumentError(
          absl::StrCat("line ", line_number, ": not an entry {DType::k.., MatrixHeight::k.., "
                       "rows, variant}"));
    }
    absl::StatusOr<ProductChoice> entry = ParseEntry(line);
    if (!entry.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("line ", line_number, ": ", entry.status().message()));
    }
    table.push_back(*entry);
  }
  return table;
}

bool HasQuantizedMatVec(DType dtype) {
  for (const DType t : kQuantizedMatVecTypes) {
    if (t == dtype) return true;
  }
  return false;
}

bool HasMmaProduct(DType dtype) {
  for (const DType t : kMmaTypes) {
    if (t == dtype) return true;
  }
  return false;
}

int ProductRowBucket(int64_t n) {
  for (const int bucket : kProductRowBuckets) {
    if (n <= bucket) return bucket;
  }
  return kProductRowBuckets.back();
}

std::string_view ProductVariantName(int64_t n, int variant) {
  if (n <= kQuantizedMaxRows) {
    if (variant < 0 || variant >= static_cast<int>(kMatVecVariants.size())) return "unknown";
    return kMatVecVariants[variant].name;
  }
  if (variant == kF16GemmVariant) return "f16-gemm";
  if (variant < 0 || variant >= static_cast<int>(kMmaVariants.size())) return "unknown";
  return kMmaVariants[variant].name;
}

std::span<const ProductChoice> ProductTable() { return kTable; }

int ChooseProductVariant(std::span<const ProductChoice> table, DType dtype, int64_t n_rows,
                         int64_t n) {
  const MatrixHeight height = HeightOf(n_rows);
  const int bucket = ProductRowBucket(n);
  const bool matvec = n <= kQuantizedMaxRows;
  for (const ProductChoice& c : table) {
    if (c.dtype != dtype || c.height != height || c.row_bucket != bucket) continue;
    if (!matvec && c.variant != kF16GemmVariant && !HasMmaProduct(dtype)) break;
    return c.variant;
  }
  return matvec ? kDefaultMatVecVariant : kF16GemmVariant;
}

}  // namespace baton::kernels::cuda
