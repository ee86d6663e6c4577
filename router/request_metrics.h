// The router's per-request metrics (metrics/README.md lists them): latency histograms (queue,
// TTFT, ITL, TPOT, end to end), the KV hand-off each request reports, token counts, and
// baton:request_success_total by outcome. Recorded by the RequestDriver along the request's way.
//
// Thread-safety: thread-safe (the series are created once, then updated with atomics).
#ifndef BATON_ROUTER_REQUEST_METRICS_H_
#define BATON_ROUTER_REQUEST_METRICS_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "baton/v1/common.pb.h"
#include "metrics/metrics.h"

namespace baton::router {

struct RequestMetrics {
  metrics::Histogram& queue_time;             // baton:request_queue_time_seconds
  metrics::Histogram& ttft;                   // baton:time_to_first_token_seconds
  metrics::Histogram& itl;                    // baton:inter_token_latency_seconds
  metrics::Histogram& tpot;                   // baton:time_per_output_token_seconds
  metrics::Histogram& e2e;                    // baton:e2e_request_latency_seconds
  metrics::Histogram& kv_transfer_seconds;    // baton:kv_transfer_seconds
  metrics::Histogram& kv_transfer_bytes;      // baton:kv_transfer_bytes
  metrics::Histogram& prompt_tokens;          // baton:request_prompt_tokens
  metrics::Histogram& generation_tokens;      // baton:request_generation_tokens
  metrics::Counter& prompt_tokens_total;      // baton:prompt_tokens_total
  metrics::Counter& generation_tokens_total;  // baton:generation_tokens_total
  metrics::Counter& migrations_total;         // baton:request_migrations_total
  metrics::Counter& cached_prompt_tokens_total;  // baton:request_cached_prompt_tokens_total

  // The series in metrics::Registry::Global(), created on the first call.
  static const RequestMetrics& Get();
};

// The finished_reason label for a request that ended with `status` (and, when OK, `reason`):
// "stop", "length", "cancelled" (the client went away), "timeout" (DEADLINE_EXCEEDED),
// "rejected" (RESOURCE_EXHAUSTED, INVALID_ARGUMENT) or "error" (anything else).
std::string RequestOutcome(const absl::Status& status, v1::FinishReason reason);

// A request ended: counts it in baton:request_success_total{finished_reason}; a successful one
// also goes into the end-to-end, TPOT (decode_time / (n_generated - 1)) and token histograms,
// and its prompt tokens the prefill worker took from its prefix cache (`n_cached_prompt`) into
// baton:request_cached_prompt_tokens_total.
void RecordRequestEnd(const absl::Status& status, v1::FinishReason reason, absl::Duration e2e,
                      absl::Duration decode_time, int64_t n_prompt, int32_t n_generated,
                      int64_t n_cached_prompt = 0);

}  // namespace baton::router

#endif  // BATON_ROUTER_REQUEST_METRICS_H_
