// One prompt to prefill: the request's tokens and first-token sampling, where its KV must go, and
// how to report back. Created by the PrefillWorker service, run by the PrefillScheduler.
//
// Thread-safety: the fields are set before the job is queued and read-only afterwards, except
// `cancelled` (atomic) and `output_matcher` (the engine thread's). `forward_done` is called at
// most once, from the engine thread, and before `done`; `done` is called exactly once, from any
// thread.
#ifndef BATON_PREFILL_WORKER_PREFILL_JOB_H_
#define BATON_PREFILL_WORKER_PREFILL_JOB_H_

#include <atomic>
#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/sampler.h"
#include "engine/sampling_params.h"
#include "engine/vocab.h"
#include "grammar/output_matcher.h"

namespace baton::prefill_worker {

struct PrefillResult {
  engine::TokenId first_token = 0;
  // When the request's sampling asked for them (SamplingParams::logprobs >= 0).
  std::optional<engine::TokenLogprobs> first_token_logprobs;
  // When the request's sampling asked for them (SamplingParams::prompt_logprobs >= 0):
  // prompt_logprobs[i] is prompt token i + 1's, [n_prompt - 1].
  std::vector<engine::TokenLogprobs> prompt_logprobs;
  int64_t kv_bytes = 0;
  double prefill_seconds = 0;      // forward pass and sampling
  double kv_transfer_seconds = 0;  // first layer pushed -> push acknowledged
  int32_t cached_tokens = 0;       // prompt tokens found in the prefix cache, not computed
  std::string kv_transport;        // how the KV travelled (KvTransport::name)
};

struct PrefillJob {
  std::string request_id;
  std::vector<engine::TokenId> prompt;
  engine::SamplingParams params;
  // Where the output stands in its constraint (params.constraint); null when unconstrained. The
  // engine thread's alone once the job is queued (it masks the first token's logits with it).
  std::unique_ptr<grammar::OutputMatcher> output_matcher;
  std::string destination;      // decode worker host:port
  std::string reservation_id;
  std::string cache_salt;       // the request's prefix-cache salt (engine/block_hash.h)
  // The prompt's first blocks the decode worker holds already: the push starts after them.
  int32_t destination_cached_blocks = 0;
  std::chrono::system_clock::time_point deadline;
  // The forward pass is done and the first token sampled; the KV push is being finished.
  std::function<void()> forward_done;
  std::function<void(absl::StatusOr<PrefillResult>)> done;
  std::atomic<bool> cancelled{false};
};

}  // namespace baton::prefill_worker

#endif  // BATON_PREFILL_WORKER_PREFILL_JOB_H_
