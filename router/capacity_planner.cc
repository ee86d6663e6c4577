#include "router/capacity_planner.h"

#include <algorithm>
#include <limits>
#include <optional>
#include <string>
#include <utility>

#include "absl/strings/str_format.h"

namespace baton::router {
namespace {

constexpr double kInfinite = std::numeric_limits<double>::infinity();

// Healthy and not draining: part of the capacity.
bool InService(const WorkerSnapshot& w) { return w.healthy && !w.draining; }

// Whether the decode side is the one under more pressure (the one a move would go to).
bool DecodeFirst(const SidePressure& p) { return p.decode >= p.prefill; }

}  // namespace

CapacityPlanner::Counts CapacityPlanner::DedicatedCounts(
    const std::vector<WorkerSnapshot>& workers) {
  Counts counts;
  for (const WorkerSnapshot& w : workers) {
    if (!InService(w)) continue;
    counts.prefill += w.role == v1::WORKER_ROLE_PREFILL;
    counts.decode += w.role == v1::WORKER_ROLE_DECODE;
  }
  return counts;
}

namespace {

// The queue over the summed rate of the prefill workers left (each removed one at the mean rate),
// over the target.
double PrefillPressure(const std::vector<const v1::WorkerLoad*>& loads, int removed,
                       absl::Duration target) {
  const FallbackSpeeds speeds = FallbackSpeeds::MeanOf(loads);
  int64_t queued = 0;
  double rate = -removed * speeds.prefill_tokens_per_second;
  for (const v1::WorkerLoad* load : loads) {
    queued += std::max<int64_t>(0, load->queued_prompt_tokens());
    rate += PrefillRate(*load, speeds);
  }
  if (static_cast<int>(loads.size()) - removed <= 0 || rate <= 0) return kInfinite;
  return static_cast<double>(queued) / rate / absl::ToDoubleSeconds(target);
}

// The TPOT with the sequences spread evenly over the decode workers left, over the target.
double DecodePressure(const std::vector<const v1::WorkerLoad*>& loads, int removed,
                      absl::Duration target) {
  const int n_left = static_cast<int>(loads.size()) - removed;
  if (n_left <= 0) return kInfinite;
  const FallbackSpeeds speeds = FallbackSpeeds::MeanOf(loads);
  int64_t sequences = 0;
  for (const v1::WorkerLoad* load : loads) {
    sequences += std::max(0, load->running_sequences()) + std::max(0, load->reservations());
  }
  return Tpot(speeds.decode_step_seconds, speeds.decode_row_cost,
              static_cast<double>(sequences) / n_left) /
         absl::ToDoubleSeconds(target);
}

}  // namespace

SidePressure PredictPressure(const std::vector<WorkerSnapshot>& workers,
                             const ServiceTargets& targets, int prefill_removed,
                             int decode_removed) {
  std::vector<const v1::WorkerLoad*> prefill_loads, decode_loads;
  for (const WorkerSnapshot& w : workers) {
    if (!InService(w)) continue;
    if (ServesPrefill(w.role)) prefill_loads.push_back(&w.load);
    if (ServesDecode(w.role)) decode_loads.push_back(&w.load);
  }
  return {.prefill = PrefillPressure(prefill_loads, prefill_removed, targets.ttft),
          .decode = DecodePressure(decode_loads, decode_removed, targets.tpot)};
}

CapacityPlanner::CapacityPlanner(CapacityPlannerOptions options) : options_(options) {}

std::optional<std::string> CapacityPlanner::WhyHold(const std::vector<WorkerSnapshot>& workers,
                                                    const Counts& counts, const SidePressure& p,
                                                    absl::Time now, double* cold_after) const {
  const bool decode_first = DecodeFirst(p);
  const double hot = decode_first ? p.decode : p.prefill;
  if (hot <= options_.move_above) {
    return absl::StrFormat("both sides within %.0f%% of their targets (prefill %.2f, decode %.2f)",
                           100 * options_.move_above, p.prefill, p.decode);
  }
  const char* hot_side = decode_first ? "decode" : "prefill";
  const char* cold_side = decode_first ? "prefill" : "decode";
  const int32_t donors = decode_first ? counts.prefill : counts.decode;
  if (donors < 2) {
    return absl::StrFormat(
        "%s at %.2f of its target, but the %s side has %d dedicated "
        "worker(s) to give",
        hot_side, hot, cold_side, donors);
  }
  const SidePressure after =
      PredictPressure(workers, options_.targets, decode_first ? 1 : 0, decode_first ? 0 : 1);
  *cold_after = decode_first ? after.prefill : after.decode;
  if (*cold_after >= options_.keep_below) {
    return absl::StrFormat(
        "%s at %.2f of its target, but %s would be at %.2f with one worker "
        "fewer (at most %.2f)",
        hot_side, hot, cold_side, *cold_after, options_.keep_below);
  }
  if (now - last_move_ < options_.dwell) {
    return absl::StrFormat("%s at %.2f of its target; the last move was %s ago (dwell %s)",
                           hot_side, hot, absl::FormatDuration(now - last_move_),
                           absl::FormatDuration(options_.dwell));
  }
  return std::nullopt;
}

PlannerDecision CapacityPlanner::Evaluate(const std::vector<WorkerSnapshot>& workers,
                                          absl::Time now) {
  PlannerDecision decision;
  const Counts counts = DedicatedCounts(workers);
  if (pending_ && *pending_ == counts) pending_.reset();  // the move was made
  const Counts recommended = pending_.value_or(counts);
  decision.prefill_workers = recommended.prefill;
  decision.decode_workers = recommended.decode;
  decision.pressure = PredictPressure(workers, options_.targets);
  double cold_after = 0;
  if (std::optional<std::string> hold =
          WhyHold(workers, counts, decision.pressure, now, &cold_after)) {
    decision.reason = *std::move(hold);
    return decision;
  }
  const bool to_decode = DecodeFirst(decision.pressure);
  last_move_ = now;
  decision.move_to = to_decode ? v1::WORKER_ROLE_DECODE : v1::WORKER_ROLE_PREFILL;
  pending_ = Counts{.prefill = counts.prefill + (to_decode ? -1 : 1),
                    .decode = counts.decode + (to_decode ? 1 : -1)};
  decision.prefill_workers = pending_->prefill;
  decision.decode_workers = pending_->decode;
  decision.reason = absl::StrFormat(
      "move a worker from %s to %s: %s predicted at %.2f of its target, %s at %.2f with one "
      "worker fewer",
      to_decode ? "prefill" : "decode", to_decode ? "decode" : "prefill",
      to_decode ? "decode" : "prefill",
      to_decode ? decision.pressure.decode : decision.pressure.prefill,
      to_decode ? "prefill" : "decode", cold_after);
  return decision;
}

}  // namespace baton::router
