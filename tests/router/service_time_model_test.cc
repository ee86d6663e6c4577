#include "router/service_time_model.h"

#include <vector>

#include "gtest/gtest.h"

namespace baton::router {
namespace {

v1::WorkerLoad Prefill(int64_t queued, double rate) {
  v1::WorkerLoad load;
  load.set_queued_prompt_tokens(queued);
  load.set_prefill_tokens_per_second(rate);
  return load;
}

v1::WorkerLoad Decode(int32_t running, int32_t reserved, double step, double row_cost) {
  v1::WorkerLoad load;
  load.set_running_sequences(running);
  load.set_reservations(reserved);
  load.set_decode_step_seconds(step);
  load.set_decode_row_cost(row_cost);
  return load;
}

TEST(ServiceTimeModelTest, PredictsPrefillFromTheQueueAndTheUncachedTokensAtTheMeasuredRate) {
  const PrefillPrediction p = PredictPrefill(Prefill(300, 1000), 200, FallbackSpeeds{});
  EXPECT_DOUBLE_EQ(p.wait_seconds, 0.3);
  EXPECT_DOUBLE_EQ(p.compute_seconds, 0.2);
  EXPECT_DOUBLE_EQ(p.ttft_seconds(), 0.5);
  // Nothing measured: the fallback's rate.
  const PrefillPrediction fresh =
      PredictPrefill(Prefill(0, 0), 100, FallbackSpeeds{.prefill_tokens_per_second = 50});
  EXPECT_DOUBLE_EQ(fresh.ttft_seconds(), 2.0);
  // A whole prompt cached (or a negative count): nothing to compute.
  EXPECT_DOUBLE_EQ(PredictPrefill(Prefill(0, 1000), -5, FallbackSpeeds{}).ttft_seconds(), 0);
}

TEST(ServiceTimeModelTest, PredictsTpotFromTheStepFitWithTheRequestAdded) {
  // 3 running + 1 reserved beside the request: 0.01 * (1 + 0.5 * 4).
  EXPECT_DOUBLE_EQ(PredictTpot(Decode(3, 1, 0.01, 0.5), FallbackSpeeds{}), 0.03);
  EXPECT_DOUBLE_EQ(PredictTpot(Decode(0, 0, 0.01, 0.5), FallbackSpeeds{}), 0.01);
  const FallbackSpeeds fallback{.decode_step_seconds = 0.02, .decode_row_cost = 0.25};
  EXPECT_DOUBLE_EQ(PredictTpot(Decode(4, 0, 0, 0), fallback), 0.04);
}

TEST(ServiceTimeModelTest, FallbackSpeedsAreTheMeansOfWhatWasMeasured) {
  const v1::WorkerLoad a = Prefill(0, 1000), b = Prefill(0, 3000), fresh = Prefill(0, 0);
  const std::vector<const v1::WorkerLoad*> loads = {&a, &b, &fresh};
  const FallbackSpeeds speeds = FallbackSpeeds::MeanOf(loads);
  EXPECT_DOUBLE_EQ(speeds.prefill_tokens_per_second, 2000);
  EXPECT_DOUBLE_EQ(speeds.decode_step_seconds, FallbackSpeeds{}.decode_step_seconds);
  EXPECT_DOUBLE_EQ(FallbackSpeeds::MeanOf({}).prefill_tokens_per_second,
                   FallbackSpeeds{}.prefill_tokens_per_second);
}

TEST(ServiceTimeModelTest, WithoutATargetTheFastestPredictedWinsThenTheCheapest) {
  const std::vector<Candidate> c = {{.predicted_seconds = 0.4, .cost = 0.1, .wait_seconds = 0.3},
                                    {.predicted_seconds = 0.3, .cost = 0.3, .wait_seconds = 0},
                                    {.predicted_seconds = 0.3, .cost = 0.2, .wait_seconds = 0.1}};
  EXPECT_EQ(ChooseWorker(c, absl::ZeroDuration()), 2u);
}

TEST(ServiceTimeModelTest, PredictionsWithinTheSameSpeedCountAsEquallyFast) {
  const std::vector<Candidate> c = {{.predicted_seconds = 0.30, .cost = 5},
                                    {.predicted_seconds = 0.32, .cost = 1},
                                    {.predicted_seconds = 0.40, .cost = 0}};
  EXPECT_EQ(ChooseWorker(c, absl::ZeroDuration()), 0u);
  // Within 10% of 0.30: the first two, and the cheaper of them.
  EXPECT_EQ(ChooseWorker(c, absl::ZeroDuration(), kSameDecodeSpeed), 1u);
}

TEST(ServiceTimeModelTest, WithinTheTargetTheCheapestWins) {
  // A cache hit (cost 0.1) predicted at 0.45 s keeps a 0.5 s target: taken over an idle worker
  // that would compute the whole prompt in 0.3 s.
  const std::vector<Candidate> c = {{.predicted_seconds = 0.3, .cost = 0.3, .wait_seconds = 0},
                                    {.predicted_seconds = 0.45, .cost = 0.1, .wait_seconds = 0.35},
                                    {.predicted_seconds = 0.9, .cost = 0.0, .wait_seconds = 0.9}};
  EXPECT_EQ(ChooseWorker(c, absl::Milliseconds(500)), 1u);
  // Equal costs within the target: the faster.
  const std::vector<Candidate> tie = {{.predicted_seconds = 0.4, .cost = 0.1},
                                      {.predicted_seconds = 0.2, .cost = 0.1}};
  EXPECT_EQ(ChooseWorker(tie, absl::Milliseconds(500)), 1u);
}

TEST(ServiceTimeModelTest, WhenNothingKeepsTheTargetTheShortestWaitWins) {
  // The holder of the prefix has 0.9 s queued; the idle worker computes everything in 2 s.
  const std::vector<Candidate> c = {{.predicted_seconds = 1.0, .cost = 0.1, .wait_seconds = 0.9},
                                    {.predicted_seconds = 2.0, .cost = 2.0, .wait_seconds = 0}};
  EXPECT_EQ(ChooseWorker(c, absl::Milliseconds(500)), 1u);
  // Without the target the same candidates go to the fastest.
  EXPECT_EQ(ChooseWorker(c, absl::ZeroDuration()), 0u);
}

}  // namespace
}  // namespace baton::router
