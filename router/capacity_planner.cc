#include "router/capacity_planner.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
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

// A worker's share of a side's capacity: 1 for a dedicated worker; for a worker of role both, 1
// while it holds no work of the other side (its engine loop gives this side every step) and 1/2
// while it does; 0 for a worker not serving the side.
double Share(v1::WorkerRole role, const v1::WorkerLoad& load, bool prefill_side) {
  if (!(prefill_side ? ServesPrefill(role) : ServesDecode(role))) return 0;
  if (role != v1::WORKER_ROLE_BOTH) return 1;
  const bool other_busy = prefill_side ? load.running_sequences() + load.reservations() > 0
                                       : load.queued_prompt_tokens() > 0;
  return other_busy ? 0.5 : 1;
}

// One side's workers: their loads and shares.
struct Side {
  std::vector<const v1::WorkerLoad*> loads;
  std::vector<double> shares;
  double capacity = 0;  // the shares' sum
};

Side SideOf(const std::vector<WorkerSnapshot>& workers, const RoleMove* move, bool prefill_side) {
  Side side;
  for (const WorkerSnapshot& w : workers) {
    const double share = InService(w) ? Share(RoleOf(w, move), w.load, prefill_side) : 0;
    if (share == 0) continue;
    side.loads.push_back(&w.load);
    side.shares.push_back(share);
    side.capacity += share;
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

// The queue (every in-service worker's) over the prefill side's summed rate, over the target.
double PrefillPressure(const Side& side, int64_t queued, const FallbackSpeeds& speeds,
                       absl::Duration target) {
  double rate = 0;
  for (size_t i = 0; i < side.loads.size(); ++i) {
    rate += side.shares[i] * PrefillRate(*side.loads[i], speeds);
  }
  if (rate <= 0) return kInfinite;
  return static_cast<double>(queued) / rate / absl::ToDoubleSeconds(target);
}

// The TPOT with the sequences spread over the decode side's capacity, at its share-weighted step
// fit, over the target.
double DecodePressure(const Side& side, int64_t sequences, const FallbackSpeeds& speeds,
                      absl::Duration target) {
  if (side.capacity <= 0) return kInfinite;
  double step = 0;
  double row_cost = 0;
  for (size_t i = 0; i < side.loads.size(); ++i) {
    const v1::WorkerLoad& load = *side.loads[i];
    step += side.shares[i] * (load.decode_step_seconds() > 0 ? load.decode_step_seconds()
                                                             : speeds.decode_step_seconds);
    row_cost += side.shares[i] *
                (load.decode_row_cost() > 0 ? load.decode_row_cost() : speeds.decode_row_cost);
  }
  return Tpot(step / side.capacity, row_cost / side.capacity,
              static_cast<double>(sequences) / side.capacity) /
         absl::ToDoubleSeconds(target);
}

}  // namespace

SidePressure PredictPressure(const std::vector<WorkerSnapshot>& workers,
                             const ServiceTargets& targets, const RoleMove* move) {
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
  return {.prefill = PrefillPressure(SideOf(workers, move, /*prefill_side=*/true), queued, speeds,
                                     targets.ttft),
          .decode = DecodePressure(SideOf(workers, move, /*prefill_side=*/false), sequences, speeds,
                                   targets.tpot)};
}

CapacityPlanner::CapacityPlanner(CapacityPlannerOptions options) : options_(options) {}

CapacityPlanner::Choice CapacityPlanner::ChooseMove(const std::vector<WorkerSnapshot>& workers,
                                                    const SidePressure& now) const {
  const bool decode_hot = now.decode >= now.prefill;
  auto hot = [&](const SidePressure& p) { return decode_hot ? p.decode : p.prefill; };
  auto cold = [&](const SidePressure& p) { return decode_hot ? p.prefill : p.decode; };
  Choice best;
  double best_score = kInfinite;
  double least_cold = kInfinite;  // among the moves that relieve the hot side
  for (const WorkerSnapshot& w : workers) {
    if (!InService(w) || (options_.registered_only && w.is_static)) continue;
    for (v1::WorkerRole to : kRoles) {
      if (to == w.role) continue;
      RoleMove move{.worker_id = w.id, .address = w.address, .from = w.role, .to = to};
      const SidePressure after = PredictPressure(workers, options_.targets, &move);
      if (!std::isfinite(after.prefill) || !std::isfinite(after.decode)) continue;
      if (hot(after) > hot(now) * (1 - options_.min_relief)) continue;
      least_cold = std::min(least_cold, cold(after));
      if (cold(after) >= options_.keep_below) continue;
      const double score = std::max(after.prefill, after.decode);
      if (score < best_score) {
        best_score = score;
        best.move = std::move(move);
        best.after = after;
      }
    }
  }
  if (best.move) return best;
  best.why_none = std::isfinite(least_cold)
                      ? absl::StrFormat(
                            "%s at %.2f of its target, but every move that relieves it leaves %s "
                            "at %.2f or more (at most %.2f)",
                            SideName(decode_hot), hot(now), SideName(!decode_hot), least_cold,
                            options_.keep_below)
                      : absl::StrFormat(
                            "%s at %.2f of its target, but no worker's move relieves it and "
                            "keeps a worker on each side",
                            SideName(decode_hot), hot(now));
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
