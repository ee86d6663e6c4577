#include "decode_worker/step_cost_model.h"

#include <limits>

#include "gtest/gtest.h"

namespace baton::decode_worker {
namespace {

TEST(StepCostModelTest, KeepsThePriorUntilTheRowCountsVary) {
  StepCostModel model(0.45);
  EXPECT_DOUBLE_EQ(model.RowCost(), 0.45);
  for (int i = 0; i < 100; ++i) model.Observe(1, 0.005);  // one row only: no slope to fit
  EXPECT_DOUBLE_EQ(model.RowCost(), 0.45);
}

TEST(StepCostModelTest, LearnsTheSlopeOfAStepsTimeInItsRows) {
  // 5 ms a step plus 1 ms a row: one more row costs 1 / (5 + 1) of a one-row step.
  StepCostModel model(0.45);
  for (int i = 0; i < 60; ++i) {
    const int rows = 1 + i % 5;
    model.Observe(rows, 0.005 + 0.001 * rows);
  }
  EXPECT_NEAR(model.RowCost(), 1.0 / 6.0, 1e-9);
  // In seconds: a one-row step is 6 ms.
  EXPECT_NEAR(model.OneRowSeconds(), 0.006, 1e-9);
}

TEST(StepCostModelTest, SaysAStepsSecondsFromTheFirstObservation) {
  StepCostModel model(0.5);
  EXPECT_EQ(model.OneRowSeconds(), 0);
  // One step of 3 rows in 10 ms, with the prior's c = 0.5: a one-row step of 10 / (1 + 0.5 * 2).
  model.Observe(3, 0.010);
  EXPECT_NEAR(model.OneRowSeconds(), 0.005, 1e-12);
  // One-row steps only (no slope to fit): their mean.
  StepCostModel single(0.5);
  for (int i = 0; i < 50; ++i) single.Observe(1, 0.004);
  EXPECT_NEAR(single.OneRowSeconds(), 0.004, 1e-12);
}

TEST(StepCostModelTest, FollowsAChangeAndForgetsTheOldSlope) {
  StepCostModel model(0.45);
  for (int i = 0; i < 60; ++i) model.Observe(1 + i % 5, 0.005 + 0.001 * (1 + i % 5));
  // The machine got busier per row: 4 ms a step plus 2 ms a row, so c = 2 / 6.
  for (int i = 0; i < 400; ++i) model.Observe(1 + i % 5, 0.004 + 0.002 * (1 + i % 5));
  EXPECT_NEAR(model.RowCost(), 1.0 / 3.0, 1e-3);
}

TEST(StepCostModelTest, AStretchOfOneRowStepsKeepsTheLastEstimate) {
  StepCostModel model(0.45);
  for (int i = 0; i < 60; ++i) model.Observe(1 + i % 5, 0.005 + 0.001 * (1 + i % 5));
  const double learned = model.RowCost();
  // One-row steps at the same 6 ms fit the same line while the old spread lasts, then stop
  // informing the slope at all.
  for (int i = 0; i < 1000; ++i) model.Observe(1, 0.006);
  EXPECT_NEAR(model.RowCost(), learned, 1e-6);
}

TEST(StepCostModelTest, ClampsAndIgnoresNonsense) {
  StepCostModel cheap(0.0);
  EXPECT_DOUBLE_EQ(cheap.RowCost(), StepCostModel::kMinRowCost);
  // Rows that make a step faster (noise) give the floor, not a negative cost.
  for (int i = 0; i < 60; ++i) cheap.Observe(1 + i % 5, 0.010 - 0.001 * (1 + i % 5));
  EXPECT_DOUBLE_EQ(cheap.RowCost(), StepCostModel::kMinRowCost);
  StepCostModel model(0.3);
  model.Observe(0, 1.0);
  model.Observe(3, 0.0);
  model.Observe(3, -1.0);
  model.Observe(3, std::numeric_limits<double>::quiet_NaN());
  for (int i = 0; i < 60; ++i) model.Observe(1 + i % 5, 0.001 + 0.010 * (1 + i % 5));
  EXPECT_NEAR(model.RowCost(), 10.0 / 11.0, 1e-9);  // the nonsense left no trace
  // A step that costs little beyond its rows: c = 10 / 2, clamped.
  for (int i = 0; i < 400; ++i) model.Observe(1 + i % 5, -0.008 + 0.010 * (1 + i % 5));
  EXPECT_DOUBLE_EQ(model.RowCost(), StepCostModel::kMaxRowCost);
}

}  // namespace
}  // namespace baton::decode_worker
