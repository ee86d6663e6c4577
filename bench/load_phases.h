// A load whose mix shifts in phases (`baton bench serve --phases`): each phase sends its own
// number of synthetic requests of its own prompt and answer lengths at its own Poisson rate, one
// phase after the other: e.g. long prompts with short answers, then short prompts with long
// answers, then back. The arrival process continues across a boundary (a phase starts one
// expected gap after the last arrival of the one before).
//
// Thread-safety: pure functions and value types.
#ifndef BATON_BENCH_LOAD_PHASES_H_
#define BATON_BENCH_LOAD_PHASES_H_

#include <cstdint>
#include <random>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "bench/serve_workload.h"

namespace baton::bench {

struct LoadPhase {
  int32_t input_len = 0;    // prompt tokens (synthetic, as --input-len)
  int32_t output_len = 0;   // answer tokens
  int32_t num_prompts = 0;  // requests in the phase
  double request_rate = 0;  // Poisson arrivals, requests/s
};

// "IN:OUT:N[:RATE],...": one phase per item; RATE defaults to `default_rate`. INVALID_ARGUMENT
// naming the item for a malformed one, a count or length below 1, or no rate above 0.
absl::StatusOr<std::vector<LoadPhase>> ParseLoadPhases(absl::string_view spec, double default_rate);

// The measured requests of a phased load, in arrival order.
struct PhasedLoad {
  std::vector<ServeRequest> requests;
  std::vector<double> arrivals;     // [request] seconds from the start, ascending
  std::vector<int32_t> phase_of;    // [request] its phase
  std::vector<double> phase_start;  // [phase] seconds: its first arrival's gap begins here
  std::vector<double> phase_end;    // [phase] the next phase's start (the last: one gap after
                                    // its last arrival)
};

// Requests as SyntheticRequests (range_ratio, calibration, rng) per phase; arrivals seeded by
// `arrival_seed`.
PhasedLoad BuildPhasedLoad(const std::vector<LoadPhase>& phases, double range_ratio,
                           const PromptCalibration& calibration, std::mt19937_64& rng,
                           uint64_t arrival_seed);

}  // namespace baton::bench

#endif  // BATON_BENCH_LOAD_PHASES_H_
