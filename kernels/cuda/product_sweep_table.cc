#include "kernels/cuda/product_sweep_table.h"

#include <cmath>
#include <map>
#include <optional>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_format.h"
#include "kernels/cpu/dequantize.h"

namespace baton::kernels::cuda {
namespace {

using ClassKey = std::tuple<DType, MatrixHeight, int>;

ClassKey ClassOf(const ProductMeasurement& m) {
  return {m.dtype, HeightOf(m.n_rows), ProductRowBucket(m.n)};
}

std::string ClassName(const ClassKey& key) {
  return absl::StrCat(std::string(DTypeName(std::get<0>(key))), " ",
                      std::get<1>(key) == MatrixHeight::kShort ? "short" : "tall", " n<=",
                      std::get<2>(key));
}

struct VariantTotal {
  double seconds = 0.0;
  bool all_correct = true;
};

// Per class, per variant: total time and whether every shape passed.
std::map<ClassKey, std::map<int, VariantTotal>> TotalsByClass(
    std::span<const ProductMeasurement> measured) {
  std::map<ClassKey, std::map<int, VariantTotal>> totals;
  for (const ProductMeasurement& m : measured) {
    if (IsReferenceOnly(m.variant)) continue;
    VariantTotal& t = totals[ClassOf(m)][m.variant];
    t.seconds += m.seconds;
    t.all_correct = t.all_correct && m.correct();
  }
  return totals;
}

bool IsChosen(const ProductMeasurement& m, std::span<const ProductChoice> chosen) {
  const auto [dtype, height, bucket] = ClassOf(m);
  for (const ProductChoice& c : chosen) {
    if (c.dtype == dtype && c.height == height && c.row_bucket == bucket) {
      return c.variant == m.variant;
    }
  }
  return false;
}

}  // namespace

bool IsReferenceOnly(int variant) {
  return variant == kBaselineVariant || variant == kCublasAloneVariant;
}

bool ProductMeasurement::correct() const {
  return std::isfinite(max_error) && max_error <= tolerance;
}

std::string ProductMeasurement::variant_name() const {
  if (variant == kBaselineVariant) return "exact-f32 (baseline)";
  if (variant == kCublasAloneVariant) return "cublas-f16-alone (reference)";
  return std::string(ProductVariantName(n, variant));
}

std::vector<ProductChoice> ChooseFastestCorrect(std::span<const ProductMeasurement> measured) {
  std::vector<ProductChoice> chosen;
  for (const auto& [key, variants] : TotalsByClass(measured)) {
    std::optional<int> best;  // variants may be negative (kF16GemmVariant)
    double best_seconds = 0.0;
    for (const auto& [variant, total] : variants) {
      if (!total.all_correct) continue;
      if (!best.has_value() || total.seconds < best_seconds) {
        best = variant;
        best_seconds = total.seconds;
      }
    }
    if (!best.has_value()) continue;
    chosen.push_back({.dtype = std::get<0>(key),
                      .height = std::get<1>(key),
                      .row_bucket = std::get<2>(key),
                      .variant = *best});
  }
  return chosen;
}

std::vector<std::string> ClassesWithoutACorrectVariant(
    std::span<const ProductMeasurement> measured) {
  std::vector<std::string> classes;
  for (const auto& [key, variants] : TotalsByClass(measured)) {
    bool any = false;
    for (const auto& [variant, total] : variants) any = any || total.all_correct;
    if (!any) classes.push_back(ClassName(key));
  }
  return classes;
}

std::string FormatSweepMarkdown(std::span<const ProductMeasurement> measured,
                                std::span<const ProductChoice> chosen, double copy_bandwidth) {
  std::map<std::tuple<std::string, DType, int64_t>, double> cublas_seconds;
  for (const ProductMeasurement& m : measured) {
    if (m.variant == kCublasAloneVariant) cublas_seconds[{m.shape, m.dtype, m.n}] = m.seconds;
  }
  std::string out =
      "| shape | type | rows x cols | n | variant | us | GB/s | of copy rate | TFLOP/s | "
      "of cuBLAS | max err/rms | ok |\n"
      "| --- | --- | --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |\n";
  for (const ProductMeasurement& m : measured) {
    const double bytes = static_cast<double>(m.n_rows) * RowBytes(m.dtype, m.n_cols);
    const double rate = m.seconds > 0 ? bytes / m.seconds : 0.0;
    const double flops = 2.0 * static_cast<double>(m.n) * m.n_rows * m.n_cols;
    const std::string share =
        copy_bandwidth > 0 ? absl::StrFormat("%.1f%%", 100.0 * rate / copy_bandwidth) : "-";
    const auto cublas = cublas_seconds.find({m.shape, m.dtype, m.n});
    const std::string of_cublas =
        cublas != cublas_seconds.end() && m.seconds > 0
            ? absl::StrFormat("%.1f%%", 100.0 * cublas->second / m.seconds)
            : "-";
    absl::StrAppend(
        &out,
        absl::StrFormat("| %s | %s | %dx%d | %d | %s%s | %.2f | %.0f | %s | %.1f | %s | %.2e | "
                        "%s |\n",
                        m.shape, std::string(DTypeName(m.dtype)), m.n_rows, m.n_cols, m.n,
                        m.variant_name(), IsChosen(m, chosen) ? " **chosen**" : "",
                        m.seconds * 1e6, rate / 1e9, share,
                        m.seconds > 0 ? flops / m.seconds / 1e12 : 0.0, of_cublas, m.max_error,
                        m.correct() ? "yes" : "NO"));
  }
  return out;
}

std::string FormatTableSource(std::span<const ProductChoice> chosen) {
  std::string out;
  for (const ProductChoice& c : chosen) {
    const std::string variant = c.variant == kF16GemmVariant ? std::string("kF16GemmVariant")
                                                             : absl::StrCat(c.variant);
    absl::StrAppend(&out, "    {DType::k", absl::AsciiStrToUpper(std::string(DTypeName(c.dtype))),
                    ", MatrixHeight::", c.height == MatrixHeight::kShort ? "kShort" : "kTall",
                    ", ", c.row_bucket, ", ", variant, "},  // ",
                    std::string(ProductVariantName(c.row_bucket, c.variant)), "\n");
  }
  return out;
}

}  // namespace baton::kernels::cuda
