#include "bench/load_phases.h"

#include <cmath>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "bench/latency_stats.h"

namespace baton::bench {
namespace {

absl::StatusOr<LoadPhase> ParsePhase(absl::string_view item, double default_rate) {
  const std::vector<absl::string_view> parts = absl::StrSplit(item, ':');
  auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(
        absl::StrCat("--phases: '", item, "': ", why, " (IN:OUT:N[:RATE], e.g. 1024:16:60:1.5)"));
  };
  if (parts.size() != 3 && parts.size() != 4) return bad("3 or 4 fields");
  LoadPhase phase;
  int32_t* ints[] = {&phase.input_len, &phase.output_len, &phase.num_prompts};
  for (int i = 0; i < 3; ++i) {
    if (!absl::SimpleAtoi(parts[i], ints[i]) || *ints[i] < 1 || *ints[i] > (1 << 20)) {
      return bad(absl::StrCat("field ", i + 1, " is not a whole number from 1 to 1048576"));
    }
  }
  phase.request_rate = default_rate;
  if (parts.size() == 4 && !absl::SimpleAtod(parts[3], &phase.request_rate)) {
    return bad("the rate is not a number");
  }
  if (!(phase.request_rate > 0) || !std::isfinite(phase.request_rate)) {
    return bad("no request rate above 0 (give RATE, or --request-rate)");
  }
  return phase;
}

}  // namespace

absl::StatusOr<std::vector<LoadPhase>> ParseLoadPhases(absl::string_view spec,
                                                       double default_rate) {
  std::vector<LoadPhase> phases;
  for (absl::string_view item : absl::StrSplit(spec, ',')) {
    absl::StatusOr<LoadPhase> phase = ParsePhase(item, default_rate);
    if (!phase.ok()) return phase.status();
    phases.push_back(*phase);
  }
  return phases;
}

PhasedLoad BuildPhasedLoad(const std::vector<LoadPhase>& phases, double range_ratio,
                           const PromptCalibration& calibration, std::mt19937_64& rng,
                           uint64_t arrival_seed) {
  PhasedLoad load;
  double start = 0;
  for (size_t k = 0; k < phases.size(); ++k) {
    const LoadPhase& phase = phases[k];
    std::vector<ServeRequest> requests = SyntheticRequests(
        phase.num_prompts, phase.input_len, phase.output_len, range_ratio, calibration, rng);
    const std::vector<double> gaps_summed =
        PoissonArrivals(phase.num_prompts, phase.request_rate, arrival_seed + k);
    load.phase_start.push_back(start);
    for (size_t i = 0; i < requests.size(); ++i) {
      load.requests.push_back(std::move(requests[i]));
      load.arrivals.push_back(start + gaps_summed[i]);
      load.phase_of.push_back(static_cast<int32_t>(k));
    }
    start += (gaps_summed.empty() ? 0 : gaps_summed.back()) + 1 / phase.request_rate;
    load.phase_end.push_back(start);
  }
  return load;
}

}  // namespace baton::bench
