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

WorkerSnapshot Both(int32_t sequences, int64_t queued = 0) {
  WorkerSnapshot w = Decode(sequences);
  w.role = v1::WORKER_ROLE_BOTH;
  w.load.set_queued_prompt_tokens(queued);
  return w;
}

// The workers named w0, w1, ... in order.
std::vector<WorkerSnapshot> Named(std::vector<WorkerSnapshot> workers) {
  for (size_t i = 0; i < workers.size(); ++i) workers[i].id = "w" + std::to_string(i);
  return workers;
}

// The workers with `demand` reported by the first of them.
std::vector<WorkerSnapshot> Arriving(std::vector<WorkerSnapshot> workers,
                                     const PromptDemand& demand) {
  workers.front().load.set_prompt_tokens_arriving_per_second(demand.tokens_per_second);
  workers.front().load.set_prompt_tokens_per_prompt(demand.tokens_per_prompt);
  return workers;
}

RoleMove Move(const std::string& id, v1::WorkerRole from, v1::WorkerRole to) {
  return {.worker_id = id, .from = from, .to = to};
}

// Prompts of 500 tokens arriving at 1,000 tokens/s.
const PromptDemand kHalfOfTwoWorkers{.tokens_per_second = 1000, .tokens_per_prompt = 500};

TEST(CapacityPlannerTest, PredictsEachSidesPressureAsItIsAndAfterAMove) {
  const std::vector<WorkerSnapshot> workers =
      Arriving(Named({Prefill(0), Prefill(0), Decode(6), Decode(6)}), kHalfOfTwoWorkers);
  // Prefill: 2,000 tokens/s, half used; a prompt's pass 0.5 s, the queueing wait at 0.5
  // 0.5 * 0.5 / (2 * 0.5) = 0.25 s: TTFT 0.75 s of 2.
  const SidePressure now = PredictPressure(workers, kTargets);
  EXPECT_DOUBLE_EQ(now.prefill, 0.375);
  // Decode: 6 sequences a worker: 0.01 * (1 + 0.5 * 6) = 40 ms of 50.
  EXPECT_DOUBLE_EQ(now.decode, 0.8);
  // w0 to decode: the demand exceeds the one prefill worker left (utilization taken at 0.95:
  // 0.5 + 0.5 * 0.95 / 0.1 = 5.25 s); 12 sequences over 3 workers: 0.01 * (1 + 0.5 * 4) = 30 ms.
  const RoleMove to_decode = Move("w0", v1::WORKER_ROLE_PREFILL, v1::WORKER_ROLE_DECODE);
  const SidePressure moved = PredictPressure(workers, kTargets, &to_decode);
  EXPECT_NEAR(moved.prefill, 2.625, 1e-12);
  EXPECT_DOUBLE_EQ(moved.decode, 0.6);
  // w2 to both: it prefills at the measured workers' mean, 1,000 tokens/s (utilization 1/3:
  // 0.5 + 0.125 s), and its sequences stall behind its prompt passes: available 2/3 of the time,
  // it takes 4.8 of the 12 sequences at 0.01 * (1 + 2.4) / (2/3) = 51 ms, w3 7.2 at 46 ms: 48 ms
  // on average, worse than the 40 ms of two decode workers.
  const RoleMove to_both = Move("w2", v1::WORKER_ROLE_DECODE, v1::WORKER_ROLE_BOTH);
  const SidePressure shared = PredictPressure(workers, kTargets, &to_both);
  EXPECT_DOUBLE_EQ(shared.prefill, 0.3125);
  EXPECT_NEAR(shared.decode, 0.96, 1e-12);
  // Without prompts arriving it decodes undisturbed: 12 sequences over 2 workers, 0.8.
  EXPECT_DOUBLE_EQ(PredictPressure(Arriving(workers, {}), kTargets, &to_both).decode, 0.8);
  EXPECT_EQ(CountRoles(workers, &to_both), (RoleCounts{.prefill = 2, .decode = 1, .both = 1}));
  // A backlog: 2,000 queued tokens take 1 s, more than the steady wait would be.
  const std::vector<WorkerSnapshot> queued =
      Named({Prefill(1500), Prefill(500), Decode(6), Decode(6)});
  EXPECT_DOUBLE_EQ(PredictPressure(queued, kTargets).prefill, 0.5);
  // With prompts arriving, the larger of the backlog and the steady wait, before a prompt's own
  // pass: 1 + 0.5 s.
  EXPECT_DOUBLE_EQ(PredictPressure(Arriving(queued, kHalfOfTwoWorkers), kTargets).prefill, 0.75);
  // A slower worker added to prefill never makes the side slower: a prompt's pass is the fastest
  // worker's (1,100 tokens/s: 0.5 + 2.5 s against 5.25 s without it).
  std::vector<WorkerSnapshot> mixed =
      Arriving(Named({Prefill(0, 1000), Decode(1)}), kHalfOfTwoWorkers);
  mixed[1].load.set_prefill_tokens_per_second(100);
  const RoleMove slow_to_both = Move("w1", v1::WORKER_ROLE_DECODE, v1::WORKER_ROLE_BOTH);
  EXPECT_NEAR(PredictPressure(mixed, kTargets).prefill, 2.625, 1e-12);
  EXPECT_NEAR(PredictPressure(mixed, kTargets, &slow_to_both).prefill, 1.5, 1e-12);
  // A side without workers cannot meet anything.
  EXPECT_EQ(PredictPressure({Prefill(10)}, kTargets).decode,
            std::numeric_limits<double>::infinity());
  // Unhealthy and draining workers are not capacity, and what they hold is not the others'
  // work: 1,500 tokens at 1,000 tokens/s; 6 sequences on the one decode worker left.
  std::vector<WorkerSnapshot> gone = queued;
  gone[1].healthy = false;
  gone[3].draining = true;
  EXPECT_DOUBLE_EQ(PredictPressure(gone, kTargets).prefill, 0.75);
  EXPECT_DOUBLE_EQ(PredictPressure(gone, kTargets).decode, 0.8);
}

TEST(CapacityPlannerTest, MovesTheWorkerThatLeavesTheHigherPressureLowest) {
  CapacityPlanner planner({.targets = kTargets});
  // Decode at 1.4 of its target, prefill light (100-token prompts at 300 tokens/s). A prefill
  // worker to decode: decode 0.8; to both: 0.84 (its passes stall its sequences a tenth of the
  // time). The first is chosen.
  const PromptDemand light{.tokens_per_second = 300, .tokens_per_prompt = 100};
  const PlannerDecision d = planner.Evaluate(
      Arriving(Named({Prefill(0), Prefill(0), Prefill(0), Decode(12)}), light),
      absl::FromUnixSeconds(100));
  ASSERT_TRUE(d.move.has_value()) << d.reason;
  EXPECT_EQ(d.move->worker_id, "w0");
  EXPECT_EQ(d.move->to, v1::WORKER_ROLE_DECODE);
  EXPECT_EQ(d.recommended, (RoleCounts{.prefill = 2, .decode = 2}));
  EXPECT_THAT(d.reason, HasSubstr("from prefill to decode"));
  // And the other way: prefill at 4.5 (9 s of queue), a decode worker to prefill or to both
  // halves it, nothing arriving to disturb decode either way: the first of equals is taken.
  CapacityPlanner other({.targets = kTargets});
  const PlannerDecision p = other.Evaluate(Named({Prefill(9000), Decode(0), Decode(0), Decode(0)}),
                                           absl::FromUnixSeconds(100));
  ASSERT_TRUE(p.move.has_value()) << p.reason;
  EXPECT_EQ(p.move->worker_id, "w1");
  EXPECT_EQ(p.move->to, v1::WORKER_ROLE_PREFILL);
  EXPECT_EQ(p.recommended, (RoleCounts{.prefill = 2, .decode = 2}));
}

// Prompts of 750 tokens at 450 tokens/s, workers prefilling 500 tokens/s: one prefill worker is
// 90% busy (TTFT 1.5 + 6.75 s of 2 s: 4.1).
const PromptDemand kNearlyOneWorker{.tokens_per_second = 450, .tokens_per_prompt = 750};

TEST(CapacityPlannerTest, WithOneWorkerASideGetsTheOtherSidesWorkerAsBoth) {
  CapacityPlanner planner({.targets = kTargets});
  // The decode worker becomes both: prefill at 0.45 utilization, 1.5 + 0.61 s: 1.06; its one
  // sequence decodes 55% of the time, 0.55 of its target. Moving either worker outright would
  // leave a side with none.
  const std::vector<WorkerSnapshot> before =
      Arriving(Named({Prefill(0, 500), Decode(1)}), kNearlyOneWorker);
  EXPECT_NEAR(PredictPressure(before, kTargets).prefill, 4.125, 1e-12);
  PlannerDecision d = planner.Evaluate(before, absl::FromUnixSeconds(100));
  ASSERT_TRUE(d.move.has_value()) << d.reason;
  EXPECT_EQ(d.move->worker_id, "w1");
  EXPECT_EQ(d.move->to, v1::WORKER_ROLE_BOTH);
  EXPECT_EQ(d.recommended, (RoleCounts{.prefill = 1, .both = 1}));
  EXPECT_THAT(d.reason, HasSubstr("prefill 1.06, decode 0.55"));
  // Decode at 1.4, nothing arriving for prefill: the prefill worker becomes both.
  CapacityPlanner other({.targets = kTargets});
  d = other.Evaluate(Named({Prefill(0), Decode(12)}), absl::FromUnixSeconds(100));
  ASSERT_TRUE(d.move.has_value()) << d.reason;
  EXPECT_EQ(d.move->worker_id, "w0");
  EXPECT_EQ(d.move->to, v1::WORKER_ROLE_BOTH);
}

TEST(CapacityPlannerTest, HoldsWhereNoMoveLowersTheHigherPressureOrEveryMoveLeavesASideEmpty) {
  CapacityPlanner planner({.targets = kTargets});
  // Decode at 1.4; prefill 80% busy (200-token prompts at 800 tokens/s). A prefill worker to
  // decode would leave the other overloaded (2.1); to both, its prompt passes would stall its
  // sequences 80% of the time (decode 1.33, not 10% lower).
  PlannerDecision d = planner.Evaluate(
      Arriving(Named({Prefill(0, 500), Prefill(0, 500), Decode(12)}),
               {.tokens_per_second = 800, .tokens_per_prompt = 200}),
      absl::FromUnixSeconds(100));
  EXPECT_FALSE(d.move.has_value());
  EXPECT_THAT(d.reason, HasSubstr("decode at 1.40 of its target, but no move lowers"));
  EXPECT_EQ(d.recommended, (RoleCounts{.prefill = 2, .decode = 1}));
  // One worker of role both, overloaded: any move leaves a side without a worker.
  d = planner.Evaluate(Named({Both(12)}), absl::FromUnixSeconds(100));
  EXPECT_FALSE(d.move.has_value());
  EXPECT_THAT(d.reason, HasSubstr("no worker's move keeps a worker on each side"));
  // A worker of role both that never decoded is assumed at the measured worker's speed, so
  // taking the measured decode worker away is no relief (were it assumed at the default 20 ms,
  // the decode worker becoming prefill would look like one).
  WorkerSnapshot unmeasured = Both(0);
  unmeasured.load.set_decode_step_seconds(0);
  unmeasured.load.set_decode_row_cost(0);
  d = planner.Evaluate(Named({unmeasured, Decode(12, 0.1)}), absl::FromUnixSeconds(100));
  EXPECT_FALSE(d.move.has_value()) << d.reason;
  EXPECT_THAT(d.reason, HasSubstr("no move lowers"));
  // Idle workers measured at 95 and 105 ms a step: decode at 2.03 of its target, and at 1.9
  // with only the faster one left decoding. Trading one worker's speed for another's is below
  // min_relief (10%): no move.
  WorkerSnapshot faster = Both(0);
  faster.load.set_decode_step_seconds(0.095);
  d = planner.Evaluate(Named({faster, Decode(0, 0.105)}), absl::FromUnixSeconds(100));
  EXPECT_FALSE(d.move.has_value()) << d.reason;
  CapacityPlanner eager({.targets = kTargets, .min_relief = 0});
  EXPECT_TRUE(
      eager.Evaluate(Named({faster, Decode(0, 0.105)}), absl::FromUnixSeconds(100)).move);
  // Nothing hot: nothing to do.
  d = planner.Evaluate(Named({Prefill(100), Prefill(100), Decode(2), Decode(2)}),
                       absl::FromUnixSeconds(100));
  EXPECT_FALSE(d.move.has_value());
  EXPECT_THAT(d.reason, HasSubstr("within 90% of their targets"));
}

TEST(CapacityPlannerTest, ActingMovesOnlyRegisteredWorkers) {
  std::vector<WorkerSnapshot> workers =
      Named({Prefill(200), Prefill(200), Prefill(200), Decode(12)});
  for (int i = 0; i < 3; ++i) workers[i].is_static = true;
  CapacityPlanner acting({.targets = kTargets, .registered_only = true});
  EXPECT_FALSE(acting.Evaluate(workers, absl::FromUnixSeconds(100)).move.has_value());
  CapacityPlanner recommending({.targets = kTargets});
  EXPECT_TRUE(recommending.Evaluate(workers, absl::FromUnixSeconds(100)).move.has_value());
}

TEST(CapacityPlannerTest, OneMovePerDwellAndNoMoveBackOnASteadyLoad) {
  CapacityPlanner planner({.targets = kTargets, .dwell = absl::Seconds(60)});
  const std::vector<WorkerSnapshot> before =
      Arriving(Named({Prefill(0, 500), Decode(1)}), kNearlyOneWorker);
  absl::Time t = absl::FromUnixSeconds(1000);
  ASSERT_TRUE(planner.Evaluate(before, t).move.has_value());
  // Not made yet: still recommended (1 prefill, 1 both), no second move within the dwell.
  PlannerDecision d = planner.Evaluate(before, t + absl::Seconds(30));
  EXPECT_FALSE(d.move.has_value());
  EXPECT_THAT(d.reason, HasSubstr("dwell"));
  EXPECT_EQ(d.recommended, (RoleCounts{.prefill = 1, .both = 1}));
  // Made. Prefill is still above its target (1.06), but no move lowers it: the other worker to
  // both leaves prefill where it is, and a move back to decode raises it to 4.1. A steady load
  // from here on: no move, however long.
  WorkerSnapshot both = Both(1);
  both.load.set_prefill_tokens_per_second(500);
  const std::vector<WorkerSnapshot> after =
      Arriving(Named({Prefill(0, 500), both}), kNearlyOneWorker);
  for (int minute = 1; minute <= 30; ++minute) {
    d = planner.Evaluate(after, t + absl::Minutes(minute));
    EXPECT_FALSE(d.move.has_value()) << minute << ": " << d.reason;
    EXPECT_THAT(d.reason, HasSubstr("prefill at 1.06 of its target, but no move lowers"));
    EXPECT_EQ(d.recommended, (RoleCounts{.prefill = 1, .both = 1}));
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
  ASSERT_TRUE(d.move.has_value()) << d.reason;
  EXPECT_EQ(d.move->to, v1::WORKER_ROLE_DECODE);
  metrics::Registry& r = metrics::Registry::Global();
  EXPECT_EQ(r.GetGauge("baton:planner_recommended_workers", "", {{"role", "decode"}}).value(), 2);
  EXPECT_EQ(r.GetGauge("baton:planner_recommended_workers", "", {{"role", "prefill"}}).value(), 2);
  EXPECT_EQ(r.GetGauge("baton:planner_recommended_workers", "", {{"role", "both"}}).value(), 0);
  EXPECT_DOUBLE_EQ(r.GetGauge("baton:planner_pressure", "", {{"side", "decode"}}).value(), 1.4);
  // Recommending only (no role changer): counted as recommended, not made.
  EXPECT_EQ(r.GetCounter("baton:planner_moves_total", "",
                         {{"to", "decode"}, {"outcome", "recommended"}})
                .value(),
            1);
}

}  // namespace
}  // namespace baton::router
