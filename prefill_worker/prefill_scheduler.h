// Batches queued prompts into prefill forward passes and hands each prompt's KV to its decode
// worker layer by layer while the next layer computes.
//
// Batching policy: first come, first served; a batch takes queued prompts in arrival order while
// their tokens fit the token budget (a prompt larger than the budget runs alone), so a long
// prompt delays at most the prompts behind it by one batch.
//
// Thread-safety: Enqueue, Cancel and queued_prompt_tokens are thread-safe; Step runs on the
// engine loop thread only.
#ifndef BATON_PREFILL_WORKER_PREFILL_SCHEDULER_H_
#define BATON_PREFILL_WORKER_PREFILL_SCHEDULER_H_

#include <atomic>
#include <deque>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "engine/kv_cache.h"
#include "engine/sampler.h"
#include "engine/transformer.h"
#include "kvtransfer/kv_transport.h"
#include "prefill_worker/prefill_job.h"

namespace baton::prefill_worker {

struct PrefillSchedulerOptions {
  int32_t max_batch_tokens = 2048;  // prompt tokens per forward pass (one longer prompt runs alone)
  std::string model_fingerprint;
  int finisher_threads = 8;         // jobs waiting for their KV push to be acknowledged at once
};

class PrefillScheduler {
 public:
  // `cache` is this worker's scratch KV (the prompt's KV is computed there, then pushed).
  PrefillScheduler(engine::Transformer* transformer, engine::KvCache* cache,
                   kvtransfer::KvTransport* transport, PrefillSchedulerOptions options);
  ~PrefillScheduler();  // fails queued jobs with UNAVAILABLE, waits for pushes in flight

  void Enqueue(std::shared_ptr<PrefillJob> job);
  // Marks the job cancelled; it fails with CANCELLED without (further) work. Returns whether a
  // queued or running job had that id.
  bool Cancel(const std::string& request_id);

  // Engine thread: runs one batch. False when nothing was queued.
  bool Step();

  int64_t queued_prompt_tokens() const { return queued_tokens_.load(); }

 private:
  struct Running {
    std::shared_ptr<PrefillJob> job;
    engine::BlockTable table;
    std::unique_ptr<kvtransfer::KvPush> push;
    absl::Status status;
  };
  std::vector<std::shared_ptr<PrefillJob>> TakeBatch();
  void FinishLater(Running running, engine::TokenId first_token, double prefill_seconds,
                   std::chrono::steady_clock::time_point push_start);
  void FinisherLoop();

  engine::Transformer& transformer_;
  engine::KvCache& cache_;
  kvtransfer::KvTransport& transport_;
  const PrefillSchedulerOptions options_;
  engine::Sampler sampler_;
  std::vector<float> logits_;

  mutable absl::Mutex mu_;
  std::deque<std::shared_ptr<PrefillJob>> queue_ ABSL_GUARDED_BY(mu_);
  std::vector<std::shared_ptr<PrefillJob>> running_ ABSL_GUARDED_BY(mu_);
  std::atomic<int64_t> queued_tokens_{0};

  // Pushes waiting for acknowledgement, finished by a few threads off the engine thread.
  struct Finishing {
    Running running;
    PrefillResult result;
    std::chrono::steady_clock::time_point push_start;
  };
  absl::Mutex finish_mu_;
  std::deque<Finishing> finishing_ ABSL_GUARDED_BY(finish_mu_);
  bool stopping_ ABSL_GUARDED_BY(finish_mu_) = false;
  std::vector<std::thread> finishers_;
};

}  // namespace baton::prefill_worker

#endif  // BATON_PREFILL_WORKER_PREFILL_SCHEDULER_H_
