#include "router/capacity_planner.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <utility>

#include "absl/strings/str_format.h"

namespace baton::router {
namespace {

constexpr double kInfinite = std::numeric_limits<double>::infinity();
constexpr v1::WorkerRole kRoles[] = {v1::WORKER_ROLE_PREFILL, v1::WORKER_ROLE_DECODE,
                                     v1::WORKER_ROLE_BOTH};

// Healthy and not draining: part of the capacity.
bool InService(const WorkerSnapshot& w) { return w.healthy && !w.draining; }

v1::WorkerRole RoleOf(const WorkerSnapshot& w, const RoleMove* move) {
  return move != nullptr && move->worker_id == w.id ? move->to : w.role;
}

// The in-service workers serving a side, with `move` made.
std::vector<const WorkerSnapshot*> Serving(const std::vector<WorkerSnapshot>& workers,
                                           const RoleMove* move, bool prefill_side) {
  std::vector<const WorkerSnapshot*> side;
  for (const WorkerSnapshot& w : workers) {
    const v1::WorkerRole role = RoleOf(w, move);
    if (InService(w) && (prefill_side ? ServesPrefill(role) : ServesDecode(role))) {
      side.push_back(&w);
    }
  }
  return side;
}

const char* SideName(bool decode) { return decode ? "decode" : "prefill"; }

}  // namespace

RoleCounts CountRoles(const std::vector<WorkerSnapshot>& workers, const RoleMove* move) {
  RoleCounts counts;
  for (const WorkerSnapshot& w : workers) {
    if (!InService(w)) continue;
    const v1::WorkerRole role = RoleOf(w, move);
    counts.prefill += role == v1::WORKER_ROLE_PREFILL;
    counts.decode += role == v1::WORKER_ROLE_DECODE;
    counts.both += role == v1::WORKER_ROLE_BOTH;
  }
  return counts;
}

namespace {

// What the prefill side is, as both pressures need it (header comment).
struct PrefillSide {
  double rate = 0;         // R: the summed prefill rate, tokens/s
  double compute = 0;      // seconds of one prompt's pass on the fastest worker
  double utilization = 0;  // u
  double backlog = 0;      // seconds to compute the queue at R
};

PrefillSide PrefillSideOf(std::span<const WorkerSnapshot* const> serving, int64_t queued,
                          const PromptDemand& demand, const FallbackSpeeds& speeds) {
  PrefillSide side;
  double fastest = 0;
  for (const WorkerSnapshot* w : serving) {
    const double rate = PrefillRate(w->load, speeds);
    side.rate += rate;
    fastest = std::max(fastest, rate);
  }
  if (side.rate <= 0) return side;
  side.compute = demand.tokens_per_prompt / fastest;
  side.backlog = static_cast<double>(queued) / side.rate;
  side.utilization = std::min(kMaxUtilization, demand.tokens_per_second / side.rate);
  return side;
}

double PrefillPressure(const PrefillSide& side, absl::Duration target) {
  if (side.rate <= 0) return kInfinite;
  const double u = side.utilization;
  const double steady_wait = side.compute * u / (2 * (1 - u));
  return (side.compute + std::max(side.backlog, steady_wait)) / absl::ToDoubleSeconds(target);
}

// The sequences spread over the decode side in proportion to each worker's availability; the
// sequence-weighted TPOT over the target.
double DecodePressure(std::span<const WorkerSnapshot* const> serving, const RoleMove* move,
                      const PrefillSide& prefill, const PromptDemand& demand, int64_t sequences,
                      const FallbackSpeeds& speeds, absl::Duration target) {
  struct Worker {
    DecodeFit fit;
    double available = 1;  // the share of time its sequences step
  };
  std::vector<Worker> side;
  double available = 0;
  for (const WorkerSnapshot* w : serving) {
    Worker d{.fit = DecodeFitOf(w->load, speeds)};
    if (ServesPrefill(RoleOf(*w, move))) {
      // At least one step between two prompt passes.
      const double step = d.fit.one_row_step_seconds;
      const double pass = demand.tokens_per_prompt / PrefillRate(w->load, speeds);
      d.available = std::max(1 - prefill.utilization, pass > 0 ? step / (step + pass) : 0);
    }
    available += d.available;
    side.push_back(d);
  }
  if (available <= 0) return kInfinite;
  double tpot_sum = 0;
  for (const Worker& d : side) {
    tpot_sum += d.fit.Tpot(static_cast<double>(sequences) * d.available / available);
  }
  return tpot_sum / available / absl::ToDoubleSeconds(target);
}

}  // namespace

PromptDemand PromptDemand::Of(const std::vector<WorkerSnapshot>& workers) {
  PromptDemand demand;
  double tokens = 0;  // per prompt, weighted by tokens per second
  for (const WorkerSnapshot& w : workers) {
    const double rate = w.load.prompt_tokens_arriving_per_second();
    if (!InService(w) || !(rate > 0)) continue;
    demand.tokens_per_second += rate;
    tokens += rate * std::max(0.0, w.load.prompt_tokens_per_prompt());
  }
  if (demand.tokens_per_second > 0) demand.tokens_per_prompt = tokens / demand.tokens_per_second;
  return demand;
}

SidePressure PredictPressure(const std::vector<WorkerSnapshot>& workers,
                             const ServiceTargets& targets, const RoleMove* move) {
  const PromptDemand demand = PromptDemand::Of(workers);
  int64_t queued = 0;
  int64_t sequences = 0;
  std::vector<const v1::WorkerLoad*> loads;
  for (const WorkerSnapshot& w : workers) {
    if (!InService(w)) continue;
    queued += std::max<int64_t>(0, w.load.queued_prompt_tokens());
    sequences += std::max(0, w.load.running_sequences()) + std::max(0, w.load.reservations());
    loads.push_back(&w.load);
  }
  // A worker that has not measured a side's speed (it has not served it) is assumed at the mean
  // of every worker that has, whatever their roles now: the same hardware does the same work.
  const FallbackSpeeds speeds = FallbackSpeeds::MeanOf(loads);
  const PrefillSide prefill =
      PrefillSideOf(Serving(workers, move, /*prefill_side=*/true), queued, demand, speeds);
  return {.prefill = PrefillPressure(prefill, targets.ttft),
          .decode = DecodePressure(Serving(workers, move, /*prefill_side=*/false), move, prefill,
                                   demand, sequences, speeds, targets.tpot)};
}

CapacityPlanner::CapacityPlanner(CapacityPlannerOptions options) : options_(options) {}

CapacityPlanner::Choice CapacityPlanner::ChooseMove(const std::vector<WorkerSnapshot>& workers,
                                                    const SidePressure& now) const {
  const double higher_now = std::max(now.prefill, now.decode);
  const double bound = higher_now * (1 - options_.min_relief);  // a move qualifies at most here
  Choice best;
  double least_higher = kInfinite;  // among the moves that keep a worker on each side
  for (const WorkerSnapshot& w : workers) {
    if (!InService(w) || (options_.registered_only && w.is_static)) continue;
    for (v1::WorkerRole to : kRoles) {
      if (to == w.role) continue;
      RoleMove move{.worker_id = w.id, .address = w.address, .from = w.role, .to = to};
      const SidePressure after = PredictPressure(workers, options_.targets, &move);
      const double higher = std::max(after.prefill, after.decode);
      if (!std::isfinite(higher)) continue;
      if (higher <= bound && higher < least_higher) {
        best.move = std::move(move);
        best.after = after;
      }
      least_higher = std::min(least_higher, higher);
    }
  }
  if (best.move) return best;
  const bool decode_hot = now.decode >= now.prefill;
  best.why_none =
      std::isfinite(least_higher)
          ? absl::StrFormat(
                "%s at %.2f of its target, but no move lowers the higher pressure by %.0f%% (the "
                "best leaves %.2f)",
                SideName(decode_hot), higher_now, 100 * options_.min_relief, least_higher)
          : absl::StrFormat(
                "%s at %.2f of its target, but no worker's move keeps a worker on each side",
                SideName(decode_hot), higher_now);
  return best;
}

PlannerDecision CapacityPlanner::Evaluate(const std::vector<WorkerSnapshot>& workers,
                                          absl::Time now) {
  PlannerDecision decision;
  const RoleCounts counts = CountRoles(workers);
  if (pending_ && *pending_ == counts) pending_.reset();  // the move was made
  decision.recommended = pending_.value_or(counts);
  const SidePressure& p = decision.pressure = PredictPressure(workers, options_.targets);
  const bool decode_hot = p.decode >= p.prefill;
  const double hot = decode_hot ? p.decode : p.prefill;
  if (hot <= options_.move_above) {
    decision.reason =
        absl::StrFormat("both sides within %.0f%% of their targets (prefill %.2f, decode %.2f)",
                        100 * options_.move_above, p.prefill, p.decode);
    return decision;
  }
  if (now - last_move_ < options_.dwell) {
    decision.reason = absl::StrFormat(
        "%s at %.2f of its target; the last move was %s ago (dwell %s)", SideName(decode_hot), hot,
        absl::FormatDuration(now - last_move_), absl::FormatDuration(options_.dwell));
    return decision;
  }
  Choice choice = ChooseMove(workers, p);
  if (!choice.move) {
    decision.reason = std::move(choice.why_none);
    return decision;
  }
  last_move_ = now;
  pending_ = CountRoles(workers, &*choice.move);
  decision.recommended = *pending_;
  decision.reason = absl::StrFormat(
      "move worker %s (%s) from %s to %s: %s predicted at %.2f of its target; after the move "
      "prefill %.2f, decode %.2f",
      choice.move->worker_id, choice.move->address, WorkerRoleName(choice.move->from),
      WorkerRoleName(choice.move->to), SideName(decode_hot), hot, choice.after.prefill,
      choice.after.decode);
  decision.move = std::move(choice.move);
  return decision;
}

}  // namespace baton::router
