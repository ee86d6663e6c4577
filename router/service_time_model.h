// Predicted service times: how long a request would take on a worker, in seconds, from what the
// worker reports of itself (v1::WorkerLoad: its queue, its measured prefill rate, the fit of its
// decode steps). KV-aware placement (worker_registry.h) compares workers in this unit, and the
// service-level targets (--slo-ttft, --slo-tpot) are stated in it.
//
// Prefill on a worker holding `cached` of a prompt's tokens in its prefix cache:
//   wait    = queued prompt tokens / rate   (the prompts ahead, without what they found cached)
//   compute = (prompt tokens - cached) / rate
//   TTFT    = wait + compute
// Decode on a worker, for a request joining its n sequences (running, waiting and reserved):
//   TPOT    = one-row step seconds * (1 + row cost * n)   (decode_worker/step_cost_model.h)
//
// A worker that has measured nothing yet (it has served no request) is predicted at the mean
// speed of those that have (FallbackSpeeds), so that with every worker equally fast the
// predictions order workers as token and sequence counts do.
//
// Choosing a worker (ChooseWorker), each candidate has the predicted time the target bounds
// (prefill: TTFT, decode: TPOT), a cost in what it uses up (prefill: compute seconds, once more
// for each decode sequence the pass stalls, as the registry counts them; decode: KV blocks to
// hand off) and a wait (prefill: the queue ahead; decode: its TPOT):
//  - no target: the lowest cost among the fastest predicted (decode: within kSameDecodeSpeed
//    of the fastest TPOT; prefill: the fastest TTFT only), then the lowest predicted time;
//  - some candidates predicted within the target: among them the lowest cost, then the lowest
//    predicted time: a cache hit is taken whenever it keeps the target;
//  - none within it (the request misses its target wherever it goes): the shortest wait, then the
//    lowest predicted time: the request goes where it delays least, which for prefill is the
//    least busy worker, so that a prefix held by one saturated worker is computed once more on
//    another and the requests sharing it find two.
//
// Thread-safety: plain values and pure functions.
#ifndef BATON_ROUTER_SERVICE_TIME_MODEL_H_
#define BATON_ROUTER_SERVICE_TIME_MODEL_H_

#include <cstdint>
#include <span>

#include "absl/time/time.h"
#include "baton/v1/common.pb.h"

namespace baton::router {

// Service-level targets; zero: none.
struct ServiceTargets {
  absl::Duration ttft = absl::ZeroDuration();
  absl::Duration tpot = absl::ZeroDuration();
};

// Speeds assumed for a worker that has not measured its own.
struct FallbackSpeeds {
  double prefill_tokens_per_second = 1000;
  double decode_step_seconds = 0.02;
  double decode_row_cost = 0.3;

  // The means over `loads` of the speeds they report (each kind over those that measured it),
  // these defaults where none did.
  static FallbackSpeeds MeanOf(std::span<const v1::WorkerLoad* const> loads);
};

struct PrefillPrediction {
  double wait_seconds = 0;     // the queue ahead of the prompt
  double compute_seconds = 0;  // the prompt's uncached tokens
  double ttft_seconds() const { return wait_seconds + compute_seconds; }
};

// The worker's measured prefill rate (tokens/s), the fallback's where it measured none.
double PrefillRate(const v1::WorkerLoad& load, const FallbackSpeeds& fallback);
// A decode step's seconds per sequence with `other_sequences` beside it.
double Tpot(double one_row_step_seconds, double row_cost, double other_sequences);

// The worker's decode step fit (decode_worker/step_cost_model.h), the fallback's where it
// measured none.
struct DecodeFit {
  double one_row_step_seconds = 0;
  double row_cost = 0;
  double Tpot(double other_sequences) const {
    return router::Tpot(one_row_step_seconds, row_cost, other_sequences);
  }
};
DecodeFit DecodeFitOf(const v1::WorkerLoad& load, const FallbackSpeeds& fallback);

PrefillPrediction PredictPrefill(const v1::WorkerLoad& load, int64_t uncached_tokens,
                                 const FallbackSpeeds& fallback);
// The time per output token of a request joining the worker's sequences.
double PredictTpot(const v1::WorkerLoad& load, const FallbackSpeeds& fallback);

// One worker a request could go to, as ChooseWorker weighs it.
struct Candidate {
  double predicted_seconds = 0;  // what the target bounds
  double cost = 0;               // what placing the request there uses up
  double wait_seconds = 0;       // what it delays the request by
};

// A prompt of `uncached_tokens` on a worker as a candidate (header comment), its pass stalling
// `stalled_sequences` decode sequences (0 on a prefill-only worker).
Candidate PrefillCandidate(const v1::WorkerLoad& load, int64_t uncached_tokens,
                           int64_t stalled_sequences, const FallbackSpeeds& fallback);

// The index of the chosen candidate (see the header comment); `target` zero: none, and then
// candidates predicted within `same_speed` (a fraction) of the fastest count as equally fast.
// `candidates` must not be empty. On a full tie, the first.
size_t ChooseWorker(std::span<const Candidate> candidates, absl::Duration target,
                    double same_speed = 0);

// Decode workers whose predicted TPOTs differ by less than this fraction count as equally fast:
// the one receiving the fewest blocks then takes the request (the step fit's error is of that
// order; the blocks saved are network bytes).
inline constexpr double kSameDecodeSpeed = 0.1;

}  // namespace baton::router

#endif  // BATON_ROUTER_SERVICE_TIME_MODEL_H_
