// What one more row of activations costs a decode step, learned from the batch's own steps: the
// c of speculation_length.h, measured on the machine, model, thread count and context lengths
// actually served rather than assumed.
//
// Each step is a point (rows fed, seconds its forward pass took). A least-squares line
// t = a + b * rows through the recent points (each older by one step weighs kForgetting less)
// gives the cost of one more row relative to a one-row step: c = b / (a + b), clamped to
// [kMinRowCost, kMaxRowCost]. Until the points span enough different row counts to fix a slope,
// and whenever they stop doing so (a stretch of one-row steps), RowCost() keeps its last estimate,
// starting from the prior.
//
// The fit also says what a step costs in seconds (OneRowSeconds), which the worker reports to the
// router (WorkerLoad.decode_step_seconds) for its predictions of a request's time here.
//
// Timings move the speed of speculation, never its output: outputs are exact whatever c is.
//
// Thread-compatible value type (the decode batch's engine thread).
#ifndef BATON_DECODE_WORKER_STEP_COST_MODEL_H_
#define BATON_DECODE_WORKER_STEP_COST_MODEL_H_

#include <cstdint>

namespace baton::decode_worker {

class StepCostModel {
 public:
  static constexpr double kForgetting = 0.98;  // a point's weight halves in about 34 steps
  static constexpr double kMinRowCost = 0.02;
  static constexpr double kMaxRowCost = 2.0;

  explicit StepCostModel(double prior_row_cost);

  // A step that fed `rows` (>= 1) activation rows took `seconds` (> 0; others are ignored).
  void Observe(int64_t rows, double seconds);

  double RowCost() const { return row_cost_; }
  // A one-row step's seconds: the recent steps' mean time over their mean rows, scaled to one row
  // by RowCost(); 0 before the first observation. A step of n rows takes about
  // OneRowSeconds() * (1 + RowCost() * (n - 1)).
  double OneRowSeconds() const { return one_row_seconds_; }

 private:
  // Refits row_cost_ when the points allow it.
  void UpdateRowCost();

  // Weighted sums over the points: weight, rows, rows^2, seconds, rows * seconds.
  double w_ = 0, r_ = 0, rr_ = 0, t_ = 0, rt_ = 0;
  double row_cost_;
  double one_row_seconds_ = 0;
};

}  // namespace baton::decode_worker

#endif  // BATON_DECODE_WORKER_STEP_COST_MODEL_H_
