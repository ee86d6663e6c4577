#include "router/request_metrics.h"

#include <vector>

namespace baton::router {

const RequestMetrics& RequestMetrics::Get() {
  static const RequestMetrics* const m = [] {
    metrics::Registry& r = metrics::Registry::Global();
    const std::vector<double> latency = metrics::LatencyBuckets();
    const std::vector<double> tokens = metrics::CountBuckets(1 << 17);
    return new RequestMetrics{
        .queue_time = r.GetHistogram("baton:request_queue_time_seconds",
                                     "Time from arrival until a decode worker reserved the "
                                     "request's KV blocks (waiting in the router's queue).",
                                     latency),
        .ttft = r.GetHistogram("baton:time_to_first_token_seconds",
                               "Time from arrival to the first token.", latency),
        .itl = r.GetHistogram("baton:inter_token_latency_seconds",
                              "Time between consecutive output tokens.", latency),
        .tpot = r.GetHistogram("baton:time_per_output_token_seconds",
                               "Mean time per output token after the first, per finished request.",
                               latency),
        .e2e = r.GetHistogram("baton:e2e_request_latency_seconds",
                              "Time from arrival to the end of a finished request.", latency),
        .kv_transfer_seconds = r.GetHistogram(
            "baton:kv_transfer_seconds",
            "KV hand-off time per request as the prefill worker reports it (first layer pushed "
            "to last acknowledgement).",
            latency),
        .kv_transfer_bytes = r.GetHistogram("baton:kv_transfer_bytes",
                                            "KV bytes handed from prefill to decode per request.",
                                            metrics::ByteBuckets()),
        .prompt_tokens = r.GetHistogram("baton:request_prompt_tokens",
                                        "Prompt tokens per finished request.", tokens),
        .generation_tokens = r.GetHistogram("baton:request_generation_tokens",
                                            "Generated tokens per finished request.", tokens),
        .prompt_tokens_total =
            r.GetCounter("baton:prompt_tokens_total", "Prompt tokens of finished requests."),
        .generation_tokens_total = r.GetCounter("baton:generation_tokens_total",
                                                "Tokens generated for finished requests."),
        .migrations_total = r.GetCounter(
            "baton:request_migrations_total",
            "Times a request moved to another prefill/decode pair after a worker failed it."),
        .cached_prompt_tokens_total = r.GetCounter(
            "baton:request_cached_prompt_tokens_total",
            "Prompt tokens of finished requests that the prefill worker took from its prefix "
            "cache."),
    };
  }();
  return *m;
}

std::string RequestOutcome(const absl::Status& status, v1::FinishReason reason) {
  if (status.ok()) {
    switch (reason) {
      case v1::FINISH_REASON_STOP:
        return "stop";
      case v1::FINISH_REASON_LENGTH:
        return "length";
      case v1::FINISH_REASON_CANCELLED:
        return "cancelled";
      default:
        return "error";
    }
  }
  if (absl::IsCancelled(status)) return "cancelled";
  if (absl::IsDeadlineExceeded(status)) return "timeout";
  if (absl::IsResourceExhausted(status) || absl::IsInvalidArgument(status)) return "rejected";
  return "error";
}

void RecordRequestEnd(const absl::Status& status, v1::FinishReason reason, absl::Duration e2e,
                      absl::Duration decode_time, int64_t n_prompt, int32_t n_generated,
                      int64_t n_cached_prompt) {
  metrics::Registry::Global()
      .GetCounter("baton:request_success_total", "Requests ended, by outcome (finished_reason).",
                  {{"finished_reason", RequestOutcome(status, reason)}})
      .Increment();
  if (!status.ok()) return;
  const RequestMetrics& m = RequestMetrics::Get();
  m.e2e.Observe(absl::ToDoubleSeconds(e2e));
  if (n_generated > 1) m.tpot.Observe(absl::ToDoubleSeconds(decode_time) / (n_generated - 1));
  m.prompt_tokens.Observe(static_cast<double>(n_prompt));
  m.generation_tokens.Observe(n_generated);
  m.prompt_tokens_total.Increment(static_cast<double>(n_prompt));
  m.generation_tokens_total.Increment(n_generated);
  m.cached_prompt_tokens_total.Increment(static_cast<double>(n_cached_prompt));
}

}  // namespace baton::router
