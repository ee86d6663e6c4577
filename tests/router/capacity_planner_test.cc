#include "router/capacity_planner.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "metrics/metrics.h"
#include "router/planner_service.h"
#include "tests/support/fake_clock.h"

namespace baton::router {
namespace {

using ::testing::HasSubstr;

const ServiceTargets kTargets{.ttft = absl::Seconds(2), .tpot = absl::Milliseconds(50)};

WorkerSnapshot Prefill(int64_t queued, double rate = 1000) {
  WorkerSnapshot w;
  w.role = v1::WORKER_ROLE_PREFILL;
  w.healthy = true;
  w.load.set_queued_prompt_tokens(queued);
  w.load.set_prefill_tokens_per_second(rate);
  return w;
}

WorkerSnapshot Decode(int32_t sequences, double step = 0.01, double row_cost = 0.5) {
  WorkerSnapshot w;
  w.role = v1::WORKER_ROLE_DECODE;
  w.healthy = true;
  w.load.set_running_sequences(sequences);
  w.load.set_decode_step_seconds(step);
  w.load.set_decode_row_cost(row_cost);
  return w;
}

TEST(CapacityPlannerTest, PredictsEachSidesPressureWithAndWithoutAWorker) {
  const std::vector<WorkerSnapshot> workers = {Prefill(1500), Prefill(500), Decode(6), Decode(6)};
  // Prefill: 2,000 queued tokens at 2,000 tokens/s: 1 s of a 2 s target.
  const SidePressure now = PredictPressure(workers, kTargets);
  EXPECT_DOUBLE_EQ(now.prefill, 0.5);
  // Decode: 6 sequences a worker: 0.01 * (1 + 0.5 * 6) = 40 ms of 50.
  EXPECT_DOUBLE_EQ(now.decode, 0.8);
  const SidePressure fewer = PredictPressure(workers, kTargets, 1, 1);
  EXPECT_DOUBLE_EQ(fewer.prefill, 1.0);  // the same queue at 1,000 tokens/s
  EXPECT_DOUBLE_EQ(fewer.decode, 1.4);   // 12 sequences on one: 70 ms
  // A side without workers cannot meet anything.
  EXPECT_EQ(PredictPressure({Prefill(10)}, kTargets).decode,
            std::numeric_limits<double>::infinity());
  // Unhealthy and draining workers are not capacity, and what they hold is not the others'
  // work: 1,500 tokens at 1,000 tokens/s; 6 sequences on the one decode worker left.
  std::vector<WorkerSnapshot> gone = workers;
  gone[1].healthy = false;
  gone[3].draining = true;
  EXPECT_DOUBLE_EQ(PredictPressure(gone, kTargets).prefill, 0.75);
  EXPECT_DOUBLE_EQ(PredictPressure(gone, kTargets).decode, 0.8);
}

TEST(CapacityPlannerTest, RecommendsMovingAWorkerToTheSideAboutToMiss) {
  CapacityPlanner planner({.targets = kTargets});
  // Decode at 1.4 of its target; prefill at 0.1, and at 0.15 with one of its 3 workers fewer.
  const std::vector<WorkerSnapshot> workers = {Prefill(200), Prefill(200), Prefill(200),
                                               Decode(12)};
  const PlannerDecision d = planner.Evaluate(workers, absl::FromUnixSeconds(100));
  EXPECT_EQ(d.move_to, v1::WORKER_ROLE_DECODE);
  EXPECT_EQ(d.prefill_workers, 2);
  EXPECT_EQ(d.decode_workers, 2);
  EXPECT_THAT(d.reason, HasSubstr("from prefill to decode"));
  // And the other way.
  CapacityPlanner other({.targets = kTargets});
  const PlannerDecision p =
      other.Evaluate({Prefill(9000), Decode(0), Decode(0), Decode(0)}, absl::FromUnixSeconds(100));
  EXPECT_EQ(p.move_to, v1::WORKER_ROLE_PREFILL);
  EXPECT_EQ(p.prefill_workers, 2);
  EXPECT_EQ(p.decode_workers, 2);
}

TEST(CapacityPlannerTest, HoldsWhereAMoveWouldHurtTheOtherSideOrTakeItsLastWorker) {
  CapacityPlanner planner({.targets = kTargets});
  // Prefill at 0.5 now, 1.0 with one worker fewer: past keep_below (0.6).
  PlannerDecision d =
      planner.Evaluate({Prefill(1000), Prefill(1000), Decode(12)}, absl::FromUnixSeconds(100));
  EXPECT_EQ(d.move_to, v1::WORKER_ROLE_UNSPECIFIED);
  EXPECT_THAT(d.reason, HasSubstr("with one worker fewer"));
  EXPECT_EQ(d.prefill_workers, 2);
  EXPECT_EQ(d.decode_workers, 1);
  // One prefill worker only: never moved.
  d = planner.Evaluate({Prefill(0), Decode(12)}, absl::FromUnixSeconds(100));
  EXPECT_EQ(d.move_to, v1::WORKER_ROLE_UNSPECIFIED);
  EXPECT_THAT(d.reason, HasSubstr("1 dedicated worker(s) to give"));
  // Workers of role both are never moved (and count on both sides).
  WorkerSnapshot both = Decode(12);
  both.role = v1::WORKER_ROLE_BOTH;
  d = planner.Evaluate({both, both, Decode(12)}, absl::FromUnixSeconds(100));
  EXPECT_EQ(d.move_to, v1::WORKER_ROLE_UNSPECIFIED);
  EXPECT_EQ(d.prefill_workers, 0);
  // Nothing hot: nothing to do.
  d = planner.Evaluate({Prefill(100), Prefill(100), Decode(2), Decode(2)},
                       absl::FromUnixSeconds(100));
  EXPECT_EQ(d.move_to, v1::WORKER_ROLE_UNSPECIFIED);
  EXPECT_THAT(d.reason, HasSubstr("within 90% of their targets"));
}

TEST(CapacityPlannerTest, OneMovePerDwellAndTheRecommendationHoldsUntilMade) {
  CapacityPlanner planner({.targets = kTargets, .dwell = absl::Seconds(60)});
  const std::vector<WorkerSnapshot> before = {Prefill(200), Prefill(200), Prefill(200), Decode(12)};
  absl::Time t = absl::FromUnixSeconds(1000);
  EXPECT_EQ(planner.Evaluate(before, t).move_to, v1::WORKER_ROLE_DECODE);
  // Not made yet: still recommended (2 and 2), no second move within the dwell.
  PlannerDecision d = planner.Evaluate(before, t + absl::Seconds(30));
  EXPECT_EQ(d.move_to, v1::WORKER_ROLE_UNSPECIFIED);
  EXPECT_THAT(d.reason, HasSubstr("dwell"));
  EXPECT_EQ(d.prefill_workers, 2);
  EXPECT_EQ(d.decode_workers, 2);
  // Made: 2 prefill, 2 decode sharing the sequences (6 each: 0.8) and the same queue (0.15).
  // A steady load from here on: no move back, however long.
  const std::vector<WorkerSnapshot> after = {Prefill(300), Prefill(300), Decode(6), Decode(6)};
  for (int minute = 1; minute <= 30; ++minute) {
    d = planner.Evaluate(after, t + absl::Minutes(minute));
    EXPECT_EQ(d.move_to, v1::WORKER_ROLE_UNSPECIFIED) << minute;
    EXPECT_EQ(d.prefill_workers, 2);
    EXPECT_EQ(d.decode_workers, 2);
  }
}

TEST(PlannerServiceTest, PublishesTheRecommendationAsMetrics) {
  test_support::FakeClock clock;
  WorkerRegistry registry(WorkerRegistryOptions{.model_fingerprint = "fp", .clock = &clock});
  v1::ModelIdentity model;
  model.set_fingerprint("fp");
  model.set_block_size(16);
  for (int i = 0; i < 3; ++i) {
    v1::WorkerLoad load;
    load.set_queued_prompt_tokens(100);
    load.set_prefill_tokens_per_second(1000);
    ASSERT_TRUE(
        registry.Register(v1::WORKER_ROLE_PREFILL, "p:" + std::to_string(i), model, load).ok());
  }
  v1::WorkerLoad busy;
  busy.set_kv_blocks_free(100);
  busy.set_kv_blocks_total(100);
  busy.set_running_sequences(12);
  busy.set_decode_step_seconds(0.01);
  busy.set_decode_row_cost(0.5);
  ASSERT_TRUE(registry.Register(v1::WORKER_ROLE_DECODE, "d:0", model, busy).ok());
  PlannerService service(&registry, {.planner = {.targets = kTargets}, .clock = &clock});
  const PlannerDecision d = service.EvaluateOnce();
  EXPECT_EQ(d.move_to, v1::WORKER_ROLE_DECODE);
  metrics::Registry& r = metrics::Registry::Global();
  EXPECT_EQ(r.GetGauge("baton:planner_recommended_workers", "", {{"role", "decode"}}).value(), 2);
  EXPECT_EQ(r.GetGauge("baton:planner_recommended_workers", "", {{"role", "prefill"}}).value(), 2);
  EXPECT_DOUBLE_EQ(r.GetGauge("baton:planner_pressure", "", {{"side", "decode"}}).value(), 1.4);
}

}  // namespace
}  // namespace baton::router
