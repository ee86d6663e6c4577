// The SLO planner (router flag --planner slo): from what the workers report (prefill queues and
// measured prefill rates, decode sequences and step fits: service_time_model.h), it predicts how
// close each side of the split is to missing its target and recommends moving one dedicated
// worker to the side that will miss first.
//
// Pressure, each side's predicted time over its target (1 = at the target):
//   prefill: (queued prompt tokens / summed prefill rate) / TTFT target
//            the wait a prompt arriving now has before its own compute;
//   decode:  one-row step x (1 + row cost x sequences per decode worker) / TPOT target
//            the time per token with the sequences spread evenly.
// A side under pressure above `move_above` gets a worker from the other side when that side has
// two or more dedicated workers, is under less pressure, and is predicted to stay below
// `keep_below` with one fewer (hysteresis: the band between the two keeps a steady load from
// recommending a move back); at most one move per `dwell`. Workers of role both count on both
// sides and are never moved.
//
// Recommending only: the router publishes the recommended counts (metrics
// baton:planner_recommended_workers{role}, baton:planner_pressure{side}) and logs each move with
// its reason, for an operator or an autoscaler (Kubernetes: one Deployment per role).
//
// Thread-safety: thread-compatible (the router's planner thread).
#ifndef BATON_ROUTER_CAPACITY_PLANNER_H_
#define BATON_ROUTER_CAPACITY_PLANNER_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "baton/v1/common.pb.h"
#include "router/service_time_model.h"
#include "router/worker_registry.h"

namespace baton::router {

struct CapacityPlannerOptions {
  ServiceTargets targets;  // both must be set
  absl::Duration dwell = absl::Seconds(60);
  double move_above = 0.9;
  double keep_below = 0.6;
};

// Predicted time over target, per side, with the workers as they are.
struct SidePressure {
  double prefill = 0;
  double decode = 0;
};

struct PlannerDecision {
  SidePressure pressure;
  // Dedicated workers recommended per role (role both excluded): the current counts, or those
  // of the last recommended move until the workers reach them.
  int32_t prefill_workers = 0;
  int32_t decode_workers = 0;
  // A move recommended by this evaluation: the role a worker should take; unspecified: none.
  v1::WorkerRole move_to = v1::WORKER_ROLE_UNSPECIFIED;
  std::string reason;  // why this evaluation recommends what it does
};

class CapacityPlanner {
 public:
  explicit CapacityPlanner(CapacityPlannerOptions options);

  // One evaluation at `now` over the healthy, undrained workers of `workers`.
  PlannerDecision Evaluate(const std::vector<WorkerSnapshot>& workers, absl::Time now);

 private:
  struct Counts {
    int32_t prefill = 0;
    int32_t decode = 0;
    bool operator==(const Counts&) const = default;
  };

  // Healthy, undrained workers per dedicated role.
  static Counts DedicatedCounts(const std::vector<WorkerSnapshot>& workers);
  // Why no move now (the header's rules), or nullopt: move one to the side under more pressure.
  // Sets `*cold_after` to the giving side's pressure with one worker fewer once it is computed.
  std::optional<std::string> WhyHold(const std::vector<WorkerSnapshot>& workers,
                                     const Counts& counts, const SidePressure& pressure,
                                     absl::Time now, double* cold_after) const;

  const CapacityPlannerOptions options_;
  absl::Time last_move_ = absl::InfinitePast();
  // The counts the last move recommended, until the workers reach them or a later move replaces
  // them: what the recommendation stays at meanwhile.
  std::optional<Counts> pending_;
};

// The sides' pressures with `prefill_removed` / `decode_removed` dedicated workers fewer (0 or
// 1); infinite where a side would have no worker.
SidePressure PredictPressure(const std::vector<WorkerSnapshot>& workers,
                             const ServiceTargets& targets, int prefill_removed = 0,
                             int decode_removed = 0);

}  // namespace baton::router

#endif  // BATON_ROUTER_CAPACITY_PLANNER_H_
