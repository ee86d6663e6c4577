// The SLO planner (router flag --planner slo|recommend): from what the workers report (prefill
// queues and measured prefill rates, decode sequences and step fits: service_time_model.h; the
// prompt tokens arriving per second and per prompt: PromptDemand), it predicts how close each
// side of the split is to missing its target and chooses one worker to change role so that the
// side about to miss first gets capacity (docs/CAPACITY.md).
//
// Pressure, each side's predicted time over its target (1 = at the target). With R the summed
// prefill rate of the workers serving prefill (prefill or both; a worker of role both gives
// prefill its whole rate: its engine loop runs a decode step between prompt passes, short beside
// them):
//   utilization u = tokens arriving per second / R, at most kMaxUtilization
//   prefill: TTFT = compute + max(queued / R, compute * u / (2 (1 - u)))
//            compute = tokens per prompt / the fastest worker's rate, the prompt's own pass (so
//            that a worker added to the side never makes it slower); the wait is the backlog
//            now or the steady queueing wait at u (M/D/1), the larger;
//   decode:  each worker serving decode is available a = 1 (role decode) or 1 - u (role both:
//            its prompt passes stall its sequences), at least one step beside one prompt pass;
//            the sequences spread over the workers in proportion to a, and
//            TPOT = sum over workers of Tpot(step, row cost, sequences there) / sum of a
//            (the sequence-weighted mean of each worker's Tpot / a).
// The queue and the sequences are every in-service worker's (a worker leaving a side still
// drains what it holds there); the capacity is the side's workers.
//
// A move: one worker to another role (prefill, decode or both). When the side under more pressure
// is above `move_above`, every move of a candidate worker is predicted; a move qualifies when
// both sides keep a worker and the higher of the two pressures falls by `min_relief` of itself at
// least (hysteresis: a move back would raise it again, so a steady load never calls for one; a
// move that only trades one worker's measured speed for another's is none). Of those, the one
// with the lowest higher pressure after it is chosen; at most one per `dwell`.
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
  double min_relief = 0.1;
  // Which workers a move may name: all in service (recommending: the counts are what matter), or
  // only registered ones (acting: a static worker's role is the router's flag).
  bool registered_only = false;
};

// Predicted time over target, per side.
struct SidePressure {
  double prefill = 0;
  double decode = 0;
};

// One worker to another role.
struct RoleMove {
  std::string worker_id;
  std::string address;
  v1::WorkerRole from = v1::WORKER_ROLE_UNSPECIFIED;
  v1::WorkerRole to = v1::WORKER_ROLE_UNSPECIFIED;
};

// In-service workers per role.
struct RoleCounts {
  int32_t prefill = 0;
  int32_t decode = 0;
  int32_t both = 0;
  bool operator==(const RoleCounts&) const = default;
};

struct PlannerDecision {
  SidePressure pressure;
  // The counts recommended: the current ones, or those of the last move until the workers reach
  // them.
  RoleCounts recommended;
  std::optional<RoleMove> move;  // chosen by this evaluation
  std::string reason;            // why this evaluation decides what it does
};

class CapacityPlanner {
 public:
  explicit CapacityPlanner(CapacityPlannerOptions options);

  // One evaluation at `now` over the healthy, undrained workers of `workers`.
  PlannerDecision Evaluate(const std::vector<WorkerSnapshot>& workers, absl::Time now);

 private:
  // The qualifying move with the lowest pressure after it (header comment), or why there is none.
  struct Choice {
    std::optional<RoleMove> move;
    SidePressure after;
    std::string why_none;
  };
  Choice ChooseMove(const std::vector<WorkerSnapshot>& workers, const SidePressure& now) const;

  const CapacityPlannerOptions options_;
  absl::Time last_move_ = absl::InfinitePast();
  // The counts the last move recommended, until the workers reach them or a later move replaces
  // them: what the recommendation stays at meanwhile.
  std::optional<RoleCounts> pending_;
};

// The in-service workers' counts per role, with `move` made when given.
RoleCounts CountRoles(const std::vector<WorkerSnapshot>& workers, const RoleMove* move = nullptr);

// What arriving prompts ask of the prefill side: the in-service workers' reports
// (prompt_tokens_arriving_per_second, prompt_tokens_per_prompt) summed, the tokens per prompt
// weighted by each worker's arrivals. Every router's prompts count, wherever they went.
struct PromptDemand {
  double tokens_per_second = 0;
  double tokens_per_prompt = 0;
  static PromptDemand Of(const std::vector<WorkerSnapshot>& workers);
};

// Prefill utilization is taken at most this (the queueing wait at it: 9.5 prompt passes).
inline constexpr double kMaxUtilization = 0.95;

// The sides' pressures with the workers as they are, or with `move` made; infinite where a side
// would have no worker.
SidePressure PredictPressure(const std::vector<WorkerSnapshot>& workers,
                             const ServiceTargets& targets, const RoleMove* move = nullptr);

}  // namespace baton::router

#endif  // BATON_ROUTER_CAPACITY_PLANNER_H_
