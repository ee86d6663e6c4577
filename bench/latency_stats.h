// The statistics of `baton bench serve`, with vLLM's benchmark_serving definitions so that numbers
// compare with what people already publish:
//
//   TTFT  request sent -> first non-empty token chunk
//   TPOT  (e2e - ttft) / (output_tokens - 1), per request, only when output_tokens > 1
//   ITL   every gap between consecutive token chunks, all requests pooled
//   E2E   request sent -> last message
//   percentiles as numpy.percentile's default (linear interpolation between closest ranks)
//   goodput: completed requests per second whose TTFT and TPOT both meet their SLO (a request
//   with at most one output token counts TPOT 0)
//
// Also the seeded generators a load needs: Poisson arrival times and uniform length draws. They
// use their own arithmetic on std::mt19937_64 (whose output the standard fixes) instead of the
// <random> distributions (whose output it does not), so a seed means the same load everywhere.
//
// Thread-safety: pure functions and value types.
#ifndef BATON_BENCH_LATENCY_STATS_H_
#define BATON_BENCH_LATENCY_STATS_H_

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <vector>

namespace baton::bench {

// numpy.percentile(values, p) with the default linear method: rank p/100 * (n - 1) into the
// sorted values, interpolated between its neighbours. `sorted` must be sorted ascending and not
// empty; p in [0, 100].
double PercentileOfSorted(std::span<const double> sorted, double p);

// Mean, population standard deviation (numpy.std), median, p90, p99, min, max. All zero with
// count 0 for no values (vLLM reports 0 for an empty list too).
struct LatencySummary {
  int64_t count = 0;
  double mean = 0;
  double stdev = 0;
  double median = 0;
  double p90 = 0;
  double p99 = 0;
  double min = 0;
  double max = 0;
};
LatencySummary Summarize(std::vector<double> values);

// What one request of a load did, as the client saw it. Times in seconds.
struct RequestOutcome {
  bool ok = false;
  std::string error;          // when !ok: the status code name ("UNAVAILABLE", "HTTP_503", ...)
  std::string error_message;  // when !ok: what the server or the client library said
  double ttft_s = 0;          // sent -> first non-empty token chunk (0 when none arrived)
  double e2e_s = 0;           // sent -> end of the stream
  std::vector<double> itl_s;  // gaps between consecutive non-empty token chunks
  int32_t prompt_tokens = 0;  // usage.prompt_tokens
  int32_t output_tokens = 0;  // usage.completion_tokens
  int32_t target_prompt_tokens = 0;  // what the workload asked for (0: unknown, e.g. a dataset)
  // What the server reported about itself (gRPC Timings; zero when not reported).
  double server_queue_s = 0;
  double server_ttft_s = 0;
  int64_t kv_bytes = 0;
  double kv_transfer_s = 0;
  double kv_tail_s = 0;  // the hand-off after the prefill forward pass (Timings.kv_tail_seconds)
  int32_t spec_draft_tokens = 0;     // speculative decoding: tokens proposed and verified
  int32_t spec_accepted_tokens = 0;  // and kept
  double mask_s = 0;                 // structured output: token masks on the decode worker
  int32_t prefill_cached_tokens = 0;  // prompt tokens the prefill worker had cached
  int32_t decode_cached_tokens = 0;   // prompt tokens the decode worker had cached (not sent)
  std::string text;                   // the generated text (a conversation's next turn needs it)
};

// Applies the TTFT / ITL / E2E definitions to one response stream as its chunks arrive.
class StreamTimer {
 public:
  using Clock = std::chrono::steady_clock;
  explicit StreamTimer(Clock::time_point sent) : sent_(sent) {}
  // A chunk arrived at `at`; `has_tokens`: it carries at least one token (an empty chunk, e.g. a
  // usage-only or keep-alive message, is not a token chunk and times nothing).
  void OnChunk(Clock::time_point at, bool has_tokens);
  // The stream ended at `at`.
  void OnEnd(Clock::time_point at) { end_ = at; }
  int32_t n_token_chunks() const { return n_token_chunks_; }
  // Sets ttft_s, itl_s and e2e_s of `outcome`.
  void Fill(RequestOutcome& outcome) const;

 private:
  Clock::time_point sent_;
  Clock::time_point first_{};
  Clock::time_point last_{};
  Clock::time_point end_{};
  int32_t n_token_chunks_ = 0;
  std::vector<double> itl_s_;
};

// vLLM's TPOT: (e2e - ttft) / (output_tokens - 1) when the request completed with more than one
// output token; nullopt otherwise.
std::optional<double> Tpot(const RequestOutcome& r);

// Service-level objectives; an unset one is not checked.
struct Slo {
  std::optional<double> ttft_s;
  std::optional<double> tpot_s;
  bool any() const { return ttft_s.has_value() || tpot_s.has_value(); }
};

// Whether a completed request meets every set SLO (TPOT 0 for at most one output token, as vLLM).
// A failed request never does.
bool MeetsSlo(const RequestOutcome& r, const Slo& slo);

struct ServeMetrics {
  int32_t completed = 0;
  int32_t failed = 0;
  std::map<std::string, int32_t> errors;  // status code name -> count
  double duration_s = 0;
  int64_t total_input_tokens = 0;         // completed requests only
  int64_t total_output_tokens = 0;
  double request_throughput = 0;          // completed / duration
  double output_throughput = 0;           // output tokens / duration
  double total_token_throughput = 0;      // (input + output tokens) / duration
  std::optional<int32_t> good_requests;   // only when an SLO is set
  std::optional<double> request_goodput;  // good_requests / duration
  LatencySummary ttft_s;
  LatencySummary tpot_s;
  LatencySummary itl_s;
  LatencySummary e2e_s;
};

// `duration_s`: first request sent -> last request done (> 0).
ServeMetrics ComputeServeMetrics(const std::vector<RequestOutcome>& outcomes, double duration_s,
                                 const Slo& slo);

// Offsets in seconds from the start of a load at which its n requests are sent: a Poisson process
// of `rate` requests per second (exponential gaps, the first one included), deterministic in
// `seed`. A non-finite or non-positive rate sends everything at 0 (vLLM's rate "inf").
std::vector<double> PoissonArrivals(int32_t n, double rate, uint64_t seed);

// A uniform integer in [lo, hi] (lo <= hi) from `rng`, same on every platform.
int64_t UniformInt(std::mt19937_64& rng, int64_t lo, int64_t hi);

// n lengths uniform in [floor(len * (1 - range_ratio)), ceil(len * (1 + range_ratio))], at least 1
// (vLLM's random dataset); range_ratio in [0, 1). range_ratio 0 gives `len` every time.
std::vector<int32_t> UniformLengths(int32_t n, int32_t len, double range_ratio,
                                    std::mt19937_64& rng);

}  // namespace baton::bench

#endif  // BATON_BENCH_LATENCY_STATS_H_
