#include "router/capacity_planner.h"

#include <limits>

#include "absl/strings/str_format.h"

namespace baton::router {
namespace {

constexpr double kInfinite = std::numeric_limits<double>::infinity();

// Healthy and not draining: part of the capacity.
bool InService(const WorkerSnapshot& w) { return w.healthy && !w.draining; }

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

SidePressure PredictPressure(const std::vector<WorkerSnapshot>& workers,
                             const ServiceTargets& targets, int prefill_removed,
                             int decode_removed) {
  std::vector<const v1::WorkerLoad*> prefill_loads, decode_loads;
  int64_t queued = 0, sequences = 0;
  for (const WorkerSnapshot& w : workers) {
    if (!InService(w)) continue;
    if (ServesPrefill(w.role)) {
      prefill_loads.push_back(&w.load);
      queued += std::max<int64_t>(0, w.load.queued_prompt_tokens());
    }
    if (ServesDecode(w.role)) {
      decode_loads.push_back(&w.load);
      sequences += std::max(0, w.load.running_sequences()) + std::max(0, w.load.reservations());
    }
  }
  const FallbackSpeeds prefill_speeds = FallbackSpeeds::MeanOf(prefill_loads);
  const FallbackSpeeds decode_speeds = FallbackSpeeds::MeanOf(decode_loads);
  SidePressure pressure;
  // Prefill: the summed rate of the workers left, each removed one at the mean rate.
  const int n_prefill = static_cast<int>(prefill_loads.size()) - prefill_removed;
  double rate = 0;
  for (const v1::WorkerLoad* load : prefill_loads) {
    rate += load->prefill_tokens_per_second() > 0 ? load->prefill_tokens_per_second()
                                                  : prefill_speeds.prefill_tokens_per_second;
  }
  rate -= prefill_removed * prefill_speeds.prefill_tokens_per_second;
  pressure.prefill = n_prefill <= 0 || rate <= 0
                         ? kInfinite
                         : static_cast<double>(queued) / rate / absl::ToDoubleSeconds(targets.ttft);
  // Decode: the sequences spread over the workers left.
  const int n_decode = static_cast<int>(decode_loads.size()) - decode_removed;
  if (n_decode <= 0) {
    pressure.decode = kInfinite;
  } else {
    const double per_worker = static_cast<double>(sequences) / n_decode;
    const double tpot = decode_speeds.decode_step_seconds *
                        (1 + decode_speeds.decode_row_cost * per_worker);
    pressure.decode = tpot / absl::ToDoubleSeconds(targets.tpot);
  }
  return pressure;
}

CapacityPlanner::CapacityPlanner(CapacityPlannerOptions options) : options_(options) {}

PlannerDecision CapacityPlanner::Evaluate(const std::vector<WorkerSnapshot>& workers,
                                          absl::Time now) {
  PlannerDecision decision;
  const Counts counts = DedicatedCounts(workers);
  if (pending_ && *pending_ == counts) pending_.reset();  // the move was made
  const Counts recommended = pending_.value_or(counts);
  decision.prefill_workers = recommended.prefill;
  decision.decode_workers = recommended.decode;
  decision.pressure = PredictPressure(workers, options_.targets);
  const SidePressure& p = decision.pressure;
  const bool decode_first = p.decode >= p.prefill;
  const double hot = decode_first ? p.decode : p.prefill;
  if (hot <= options_.move_above) {
    decision.reason = absl::StrFormat("both sides within %.0f%% of their targets (prefill %.2f, "
                                      "decode %.2f)",
                                      100 * options_.move_above, p.prefill, p.decode);
    return decision;
  }
  const char* hot_side = decode_first ? "decode" : "prefill";
  const char* cold_side = decode_first ? "prefill" : "decode";
  const int32_t donors = decode_first ? counts.prefill : counts.decode;
  if (donors < 2) {
    decision.reason = absl::StrFormat("%s at %.2f of its target, but the %s side has %d "
                                      "dedicated worker(s) to give",
                                      hot_side, hot, cold_side, donors);
    return decision;
  }
  const SidePressure after =
      PredictPressure(workers, options_.targets, decode_first ? 1 : 0, decode_first ? 0 : 1);
  const double cold_after = decode_first ? after.prefill : after.decode;
  if (cold_after >= options_.keep_below) {
    decision.reason = absl::StrFormat("%s at %.2f of its target, but %s would be at %.2f with "
                                      "one worker fewer (at most %.2f)",
                                      hot_side, hot, cold_side, cold_after, options_.keep_below);
    return decision;
  }
  if (now - last_move_ < options_.dwell) {
    decision.reason = absl::StrFormat("%s at %.2f of its target; the last move was %s ago (dwell "
                                      "%s)",
                                      hot_side, hot, absl::FormatDuration(now - last_move_),
                                      absl::FormatDuration(options_.dwell));
    return decision;
  }
  last_move_ = now;
  decision.move_to = decode_first ? v1::WORKER_ROLE_DECODE : v1::WORKER_ROLE_PREFILL;
  pending_ = Counts{.prefill = counts.prefill + (decode_first ? -1 : 1),
                    .decode = counts.decode + (decode_first ? 1 : -1)};
  decision.prefill_workers = pending_->prefill;
  decision.decode_workers = pending_->decode;
  decision.reason = absl::StrFormat("move a worker from %s to %s: %s predicted at %.2f of its "
                                    "target, %s at %.2f with one worker fewer",
                                    cold_side, hot_side, hot_side, hot, cold_side, cold_after);
  return decision;
}

}  // namespace baton::router
