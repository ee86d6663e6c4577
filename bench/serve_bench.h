// `baton bench serve`: a load generator against the router, reporting latency and throughput with
// vLLM's benchmark_serving definitions (bench/latency_stats.h).
//
// A run: build the requests (a JSONL dataset, or synthetic prompts of a given token length,
// calibrated against the server), send `warmup` requests that are not measured, then send
// `num_prompts` requests either at Poisson arrival times of a given rate (open loop, seeded) or
// with a fixed number in flight (closed loop), and wait for all of them.
//
// Phases (phases non-empty): the open loop's requests come in phases of their own lengths and
// rates (load_phases.h); the report adds each phase's metrics ("phases"), its goodput over the
// phase's span of arrivals.
//
// Multi-turn (conversations > 0): synthetic conversations sharing a system prompt
// (serve_workload.h), `concurrency` of them in flight, each sending its turns one after the other
// (turn t's prompt holds every earlier turn and its answer); `warmup` conversations go first,
// unmeasured. The report adds what prefix caching saved: prefill tokens computed, prompt tokens
// found cached on each side, KV bytes handed off. Every request has a
// deadline, so the run always ends; failures are counted by status code, never fatal.
//
// Thread-safety: RunServeBench is thread-compatible (it runs its own threads: one per request in
// flight).
#ifndef BATON_BENCH_SERVE_BENCH_H_
#define BATON_BENCH_SERVE_BENCH_H_

#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "bench/latency_stats.h"
#include "bench/load_phases.h"
#include "bench/serve_client.h"
#include "nlohmann/json.hpp"

namespace baton::bench {

struct ServeBenchOptions {
  ServeClientOptions client;
  double request_rate = 0;      // > 0: Poisson arrivals at this rate (requests/s); inf: all at once
  int32_t concurrency = 0;      // > 0: closed loop with this many requests in flight
  int32_t max_in_flight = 1024; // open loop: arrivals wait while this many are in flight
  int32_t num_prompts = 100;
  int32_t warmup = 0;
  int32_t input_len = 256;      // synthetic prompts (when dataset_path is empty)
  int32_t output_len = 64;
  double range_ratio = 0;
  std::string dataset_path;     // JSONL: {"prompt": ..., "max_tokens": ...} per line
  Slo slo;
  uint64_t seed = 0;
  bool keep_requests = true;    // per-request arrays in the JSON ("requests")
  // Multi-turn workload (closed loop only): conversations > 0 turns it on.
  int32_t conversations = 0;
  int32_t turns = 4;
  int32_t system_prompt_len = 1024;  // tokens, shared by every conversation
  int32_t turn_len = 64;             // user tokens per turn
  // A mix that shifts (open loop only; load_phases.h): non-empty, it replaces num_prompts,
  // input_len, output_len and request_rate; warmup requests take the first phase's lengths.
  std::vector<LoadPhase> phases;
};

// The result as one JSON object (keys named as vLLM's benchmark_serving: request_throughput,
// mean_ttft_ms, median_ttft_ms, p90_ttft_ms, p99_ttft_ms, ..., request_goodput), plus errors by
// code, the prompt-length check, the server's own timings and, when asked, per-request arrays.
// `log` gets progress lines. Errors only for bad options or an unreadable dataset.
struct ServeBenchResult {
  nlohmann::json json;
  std::vector<RequestOutcome> outcomes;  // the measured requests, in request order
};
absl::StatusOr<ServeBenchResult> RunServeBench(const ServeBenchOptions& options, std::ostream& log);

// The readable table (vLLM's layout) of a result's JSON.
std::string FormatServeTable(const nlohmann::json& result);

// The measured part of a result as JSON, from outcomes (exposed for tests).
nlohmann::json MetricsJson(const ServeMetrics& metrics, const Slo& slo);

// Each worker's prefix cache over the run: the change of its counters between two ClusterStatus
// answers (workers absent from `before` count from zero), hit rates in tokens and blocks.
nlohmann::json WorkerPrefixCacheJson(const baton::v1::ClusterStatusResponse& before,
                                     const baton::v1::ClusterStatusResponse& after);

}  // namespace baton::bench

#endif  // BATON_BENCH_SERVE_BENCH_H_
