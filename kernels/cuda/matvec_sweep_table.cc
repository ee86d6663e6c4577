#include "kernels/cuda/matvec_sweep_table.h"

#include <cmath>
#include <map>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_format.h"
#include "kernels/cpu/dequantize.h"

namespace baton::kernels::cuda {
namespace {

using ClassKey = std::tuple<DType, MatrixHeight, int>;

ClassKey ClassOf(const MatVecMeasurement& m) {
  return {m.dtype, HeightOf(m.n_rows), MatVecRowBucket(m.n)};
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
    std::span<const MatVecMeasurement> measured) {
  std::map<ClassKey, std::map<int, VariantTotal>> totals;
  for (const MatVecMeasurement& m : measured) {
    if (m.variant == kBaselineVariant) continue;
    VariantTotal& t = totals[ClassOf(m)][m.variant];
    t.seconds += m.seconds;
    t.all_correct = t.all_correct && m.correct();
  }
  return totals;
}

bool IsChosen(const MatVecMeasurement& m, std::span<const MatVecChoice> chosen) {
  const auto [dtype, height, bucket] = ClassOf(m);
  for (const MatVecChoice& c : chosen) {
    if (c.dtype == dtype && c.height == height && c.row_bucket == bucket) {
      return c.variant == m.variant;
    }
  }
  return false;
}

}  // namespace

bool MatVecMeasurement::correct() const {
  return std::isfinite(max_error) && max_error <= tolerance;
}

std::string MatVecMeasurement::variant_name() const {
  if (variant == kBaselineVariant) return "exact-f32 (baseline)";
  if (variant < 0 || variant >= static_cast<int>(kMatVecVariants.size())) return "unknown";
  return std::string(kMatVecVariants[variant].name);
}

std::vector<MatVecChoice> ChooseFastestCorrect(std::span<const MatVecMeasurement> measured) {
  std::vector<MatVecChoice> chosen;
  for (const auto& [key, variants] : TotalsByClass(measured)) {
    int best = -1;
    double best_seconds = 0.0;
    for (const auto& [variant, total] : variants) {
      if (!total.all_correct) continue;
      if (best < 0 || total.seconds < best_seconds) {
        best = variant;
        best_seconds = total.seconds;
      }
    }
    if (best < 0) continue;
    chosen.push_back({.dtype = std::get<0>(key),
                      .height = std::get<1>(key),
                      .row_bucket = std::get<2>(key),
                      .variant = best});
  }
  return chosen;
}

std::vector<std::string> ClassesWithoutACorrectVariant(
    std::span<const MatVecMeasurement> measured) {
  std::vector<std::string> classes;
  for (const auto& [key, variants] : TotalsByClass(measured)) {
    bool any = false;
    for (const auto& [variant, total] : variants) any = any || total.all_correct;
    if (!any) classes.push_back(ClassName(key));
  }
  return classes;
}

std::string FormatSweepMarkdown(std::span<const MatVecMeasurement> measured,
                                std::span<const MatVecChoice> chosen, double copy_bandwidth) {
  std::string out =
      "| shape | type | rows x cols | n | variant | us | GB/s | of copy rate | max err/rms | ok |\n"
      "| --- | --- | --- | ---: | --- | ---: | ---: | ---: | ---: | --- |\n";
  for (const MatVecMeasurement& m : measured) {
    const double bytes = static_cast<double>(m.n_rows) * RowBytes(m.dtype, m.n_cols);
    const double rate = m.seconds > 0 ? bytes / m.seconds : 0.0;
    const std::string share =
        copy_bandwidth > 0 ? absl::StrFormat("%.1f%%", 100.0 * rate / copy_bandwidth) : "-";
    absl::StrAppend(
        &out,
        absl::StrFormat("| %s | %s | %dx%d | %d | %s%s | %.2f | %.0f | %s | %.2e | %s |\n",
                        m.shape, std::string(DTypeName(m.dtype)), m.n_rows, m.n_cols, m.n,
                        m.variant_name(),
                        IsChosen(m, chosen) ? " **chosen**" : "", m.seconds * 1e6, rate / 1e9,
                        share, m.max_error, m.correct() ? "yes" : "NO"));
  }
  return out;
}

std::string FormatTableSource(std::span<const MatVecChoice> chosen) {
  std::string out;
  for (const MatVecChoice& c : chosen) {
    absl::StrAppend(&out, "    {DType::k", absl::AsciiStrToUpper(std::string(DTypeName(c.dtype))),
                    ", MatrixHeight::", c.height == MatrixHeight::kShort ? "kShort" : "kTall",
                    ", ", c.row_bucket, ", ", c.variant, "},  // ",
                    std::string(kMatVecVariants[c.variant].name), "\n");
  }
  return out;
}

}  // namespace baton::kernels::cuda
