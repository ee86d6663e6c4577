#include "decode_worker/step_cost_model.h"

#include <algorithm>

namespace baton::decode_worker {
namespace {

// Enough weight for a fit (about 8 recent steps) and enough spread of row counts for a slope (a
// tenth of a row's variance: one step of 5 rows among 30 of 1 has 0.5).
constexpr double kMinWeight = 8;
constexpr double kMinRowVariance = 0.1;

}  // namespace

StepCostModel::StepCostModel(double prior_row_cost)
    : row_cost_(std::clamp(prior_row_cost, kMinRowCost, kMaxRowCost)) {}

void StepCostModel::Observe(int64_t rows, double seconds) {
  if (rows < 1 || !(seconds > 0)) return;
  const double r = static_cast<double>(rows);
  w_ = kForgetting * w_ + 1;
  r_ = kForgetting * r_ + r;
  rr_ = kForgetting * rr_ + r * r;
  t_ = kForgetting * t_ + seconds;
  rt_ = kForgetting * rt_ + r * seconds;
  UpdateRowCost();
  const double mean_r = r_ / w_;
  one_row_seconds_ = (t_ / w_) / (1 + row_cost_ * (mean_r - 1));
}

void StepCostModel::UpdateRowCost() {
  if (w_ < kMinWeight) return;
  const double mean_r = r_ / w_;
  const double variance = rr_ / w_ - mean_r * mean_r;
  if (variance < kMinRowVariance) return;
  const double slope = (rt_ / w_ - mean_r * (t_ / w_)) / variance;  // b: seconds per row
  const double intercept = t_ / w_ - slope * mean_r;                // a: seconds per step
  const double one_row = intercept + slope;
  if (!(one_row > 0)) return;
  row_cost_ = std::clamp(slope / one_row, kMinRowCost, kMaxRowCost);
}

}  // namespace baton::decode_worker
