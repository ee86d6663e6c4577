// Batches queued prompts into prefill forward passes and hands each prompt's KV to its decode
// worker layer by layer while the next layer computes.
//
// Batching policy: first come, first served; a step takes queued work in arrival order while its
// tokens fit the token budget (max_batch_tokens).
//
// Chunked prefill: a prompt longer than the budget is prefilled in chunks of chunk_tokens = the
// budget rounded down to whole KV blocks (at least one block). Each chunk attends to the chunks
// before it (kept in this worker's scratch KV) and its KV is pushed as soon as each layer is done,
// as one block range of the request's push (kv_push_spec.h). After each chunk the prompt goes to
// the back of the queue, so a short prompt arriving behind a long one waits for at most one
// chunk, and a long prompt advances one chunk per turn of the queue: neither starves. The first
// token is sampled after the last chunk. Chunking changes no result: every kernel is
// batch-invariant and attention reads the same cached KV either way.
//
// Prefix caching (with options.prefix_cache): a prompt starts from the longest cached prefix of
// its full blocks (leaving at least one token to compute), computes only the rest, and publishes
// its full blocks as they are computed. The push starts at the decode worker's own cached prefix
// (PrefillJob::destination_cached_blocks): blocks the decode worker lacks but this worker had
// cached are sent from the cache; blocks it has are computed here (they are needed to attend
// over) but not sent. A chunked prompt's chunks end on the push's range boundaries (multiples of
// chunk_tokens from token 0), so that each chunk completes one range.
//
// Prompt log-probabilities (SamplingParams::prompt_logprobs): such a prompt takes nothing from the
// prefix cache (every position's logits are computed; its blocks are still published), and each
// of its steps asks the forward pass for the logits of all of its tokens, not only the last; its
// chunks are small enough for those logits to stay within options.max_prompt_logit_floats.
//
// Scratch KV: a prompt takes the blocks for all of its tokens when its first chunk starts and
// returns them once its push is over (acknowledged, failed or cancelled) and the transport reads
// them no more (kv_transport.h: the network may hold views of them a while longer); a finisher
// thread waits for that, never the engine loop. Cached ones stay in the prefix cache. A new
// prompt whose blocks are not free waits (and so do new prompts behind it); prompts already
// under way go on. Blocks freed after a push call options.blocks_freed, so that a waiting prompt
// gets its turn.
//
// KV in a device's memory (a GPU's cache) travels through host copies: each layer's blocks are
// queued for copying to page-locked host memory as the layer ends, on the device's copy stream
// (host_staging.h), and the push waits for each copy before it reads it, so the forward pass
// never waits for the hand-off. A copy that fails fails the push as this worker's fault.
//
// Thread-safety: Enqueue, Cancel and queued_prompt_tokens are thread-safe; Step runs on the
// engine loop thread only.
#ifndef BATON_PREFILL_WORKER_PREFILL_SCHEDULER_H_
#define BATON_PREFILL_WORKER_PREFILL_SCHEDULER_H_

#include <atomic>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "base/arrival_rate.h"
#include "base/decaying_rate.h"
#include "engine/kv_cache.h"
#include "engine/prefix_cache.h"
#include "engine/sampler.h"
#include "engine/forward_pass.h"
#include "engine/kv_shards.h"
#include "kvtransfer/kv_transport.h"
#include "prefill_worker/host_staging.h"
#include "prefill_worker/prefill_job.h"

namespace baton::prefill_worker {

struct PrefillSchedulerOptions {
  int32_t max_batch_tokens = 2048;  // prompt tokens per forward pass; longer prompts are chunked
  std::string model_fingerprint;
  int finisher_threads = 8;         // jobs waiting for their KV push to be acknowledged at once
  engine::PrefixCache* prefix_cache = nullptr;  // of the scratch KV; null: none; must outlive
  // Page-locked host buffers kept for later pushes when the KV is in a device's memory.
  size_t host_staging_idle_bytes = size_t{1} << 30;
  // Logits a prompt with prompt log-probabilities may have computed in one step at most, in
  // floats (rows of n_vocab): such a prompt is chunked to stay within it (whole KV blocks, at
  // least one).
  int64_t max_prompt_logit_floats = int64_t{64} << 20;
  // Called on a finisher thread after a push's scratch blocks went back (wakes the engine loop).
  std::function<void()> blocks_freed = [] {};
  // A tensor-parallel group's caches (engine/kv_shards.h), `cache` being rank 0's: the push
  // sends whole-model blocks assembled from the ranks. Null: the cache is the whole model's.
  engine::KvShards* kv_shards = nullptr;
};

class PrefillScheduler {
 public:
  // `cache` is this worker's scratch KV (the prompt's KV is computed there, then pushed).
  PrefillScheduler(engine::ForwardPass* transformer, engine::KvCache* cache,
                   kvtransfer::KvTransport* transport, PrefillSchedulerOptions options);
  ~PrefillScheduler();  // fails queued jobs with UNAVAILABLE, waits for pushes in flight

  void Enqueue(std::shared_ptr<PrefillJob> job);
  // Marks the job cancelled; it fails with CANCELLED without (further) work. Returns whether a
  // queued or running job had that id.
  bool Cancel(const std::string& request_id);

  // Engine thread: runs one batch. False when nothing was queued.
  bool Step();

  // Prompt tokens still to compute, over every queued prompt (also those part-way through, and
  // the tokens of the pass running now until it ends): a prompt not started yet counts without
  // the prefix its arrival found cached (the cache may change before it starts; the count follows
  // what it then takes).
  int64_t queued_prompt_tokens() const { return queued_tokens_.load(); }
  // Prompt tokens per second of forward pass over the recent steps; 0 before the first.
  double prompt_tokens_per_second() const { return tokens_per_second_.load(); }
  // The prompts enqueued recently: their tokens not found cached at arrival, per second over
  // about kArrivalWindow and per prompt over about the last ten.
  struct Arrivals {
    double tokens_per_second = 0;
    double tokens_per_prompt = 0;
  };
  Arrivals arrivals() const;
  static constexpr absl::Duration kArrivalWindow = absl::Seconds(10);
  // Tokens per chunk of a prompt longer than the budget.
  int32_t chunk_tokens() const { return chunk_tokens_; }

 private:
  // A step's weight in the measured rate halves in about 7 steps.
  static constexpr double kRateForgetting = 0.9;

  // A prompt in the queue or in this step, possibly part-way through a chunked prefill.
  struct Work {
    std::shared_ptr<PrefillJob> job;
    engine::BlockTable table;   // this worker's scratch KV for the whole prompt
    // Host copies of the blocks sent so far, when the KV is in a device's memory (the transport
    // may read them until the push's Finish or Cancel; they go with the work, after the push).
    std::vector<std::unique_ptr<StagedLayer>> staged;
    // Whole-model copies of the blocks sent so far, when the KV is a tensor-parallel group's
    // (held as `staged` is).
    std::vector<std::unique_ptr<uint8_t[]>> assembled;
    // Set (by any thread) when staging failed: the push failed through this worker's fault,
    // not its destination's.
    std::shared_ptr<std::atomic<bool>> staging_failed = std::make_shared<std::atomic<bool>>();
    std::unique_ptr<kvtransfer::KvPush> push;  // set (with table) once its first chunk starts
    kvtransfer::KvPushSpec push_spec;            // set with push
    bool matched = false;       // the prefix cache was looked up (table holds the hit)
    int32_t n_cached = 0;       // prompt tokens taken from the prefix cache
    int32_t n_cached_at_arrival = 0;  // what the cache held of it at Enqueue (queued_tokens_)
    int32_t chunk_tokens = 0;   // tokens per push range when chunked; 0: one piece
    int32_t next_send_block = 0;  // the next block of the push to send
    int32_t n_done = 0;         // prompt tokens prefilled (or cached)
    int32_t n_step = 0;         // tokens this step prefills
    // When the request asks for them, the prompt tokens' log-probabilities so far.
    std::vector<engine::TokenLogprobs> prompt_logprobs;
    double forward_seconds = 0;
    std::chrono::steady_clock::time_point push_start;
    absl::Status status;        // first failure of this step

    int32_t n_prompt() const { return static_cast<int32_t>(job->prompt.size()); }
    bool wants_prompt_logprobs() const { return job->params.prompt_logprobs >= 0; }
    bool started() const { return push != nullptr; }
  };
  // Tokens per chunk of a prompt with prompt log-probabilities.
  int32_t PromptLogprobsChunkTokens() const;
  // Tokens `work` prefills in its next step.
  int32_t NextPiece(const Work& work) const;
  // Whether `work` starts from the prefix cache (there is one, and no prompt log-probabilities).
  bool UsesPrefixCache(const Work& work) const;
  // Takes the cached prefix of a new prompt and decides its chunking.
  void MatchPrefix(Work& work);
  // Sends the push's ranges that lie wholly in the cached prefix (before any compute).
  absl::Status SendCachedRanges(Work& work);
  // Hands a push that reads device memory (a link) the blocks where they lie, ready once the
  // device has computed them.
  absl::Status SendDeviceLayer(Work& work, int32_t layer,
                               const std::vector<const uint8_t*>& blocks);
  // Sends layer `layer` of the blocks not sent yet up to `end_block` (one range of the push);
  // nothing when the receiver has them all.
  absl::Status SendLayerUpTo(Work& work, int32_t layer, int32_t end_block);
  // Sends the blocks through host copies (the cache is in a device's memory).
  absl::Status SendStagedLayer(Work& work, int32_t layer,
                               const std::vector<const uint8_t*>& blocks);
  // Sends blocks [begin, end) of the layer assembled from a tensor-parallel group's ranks.
  absl::Status SendAssembledLayer(Work& work, int32_t layer, int32_t begin, int32_t end);
  // The status a failed push gives its job: marked as the destination's fault
  // (rpc::KvDestinationFault) unless staging the KV here failed.
  static absl::Status PushFailure(const Work& work, absl::Status status);
  std::vector<Work> TakeBatch();
  // After a step's forward pass: appends the log-probabilities of the prompt tokens that the
  // step's logits `rows` [n_step, n_vocab] predict (all but the last row predict one).
  void AppendPromptLogprobs(Work& work, const float* rows) const;
  // Reserves the scratch KV and opens the push: the error when either fails.
  absl::Status Start(Work& work);
  // Fails the job with `status`: abandons its push and returns its scratch blocks (through a
  // finisher once the push has let go of them, when there is a push).
  void Fail(Work work, absl::Status status);
  // What a finished push's scratch KV holds until the transport lets go of it.
  struct Scratch {
    engine::BlockTable table;
    std::vector<std::unique_ptr<StagedLayer>> staged;
    std::vector<std::unique_ptr<uint8_t[]>> assembled;
  };
  // Pushes whose scratch blocks are not back yet; `owner` null once the scheduler is gone.
  struct PendingReleases {
    absl::Mutex mu;
    int64_t pending ABSL_GUARDED_BY(mu) = 0;
    PrefillScheduler* owner ABSL_GUARDED_BY(mu) = nullptr;
  };
  // Finisher: hands work's scratch KV to its push's WhenBlocksReleased, which frees it.
  void ReleaseScratch(Work& work);
  // Returns the blocks and host copies to their pools (any thread); calls blocks_freed.
  void FreeScratch(Scratch& scratch);
  // Hands `work`, its forward pass done and its first token sampled (`result`), to the finisher,
  // which completes the job once its push is acknowledged.
  void FinishLater(Work work, PrefillResult result);
  void FinisherLoop();

  engine::ForwardPass& transformer_;
  engine::KvCache& cache_;
  kvtransfer::KvTransport& transport_;
  const PrefillSchedulerOptions options_;
  const int32_t chunk_tokens_;
  engine::Sampler sampler_;
  std::vector<float> logits_;
  // Host copies of the KV for the push when the cache is in a device's memory; null otherwise.
  // Before the works, so that it goes after them.
  std::unique_ptr<HostStagingPool> staging_;

  mutable absl::Mutex mu_;
  std::deque<Work> queue_ ABSL_GUARDED_BY(mu_);
  std::vector<std::shared_ptr<PrefillJob>> running_ ABSL_GUARDED_BY(mu_);
  std::atomic<int64_t> queued_tokens_{0};
  ArrivalRate arriving_tokens_ ABSL_GUARDED_BY(mu_){kArrivalWindow, absl::Now()};
  // A mean over recent prompts: one "second" per prompt.
  DecayingRate tokens_per_prompt_ ABSL_GUARDED_BY(mu_){kRateForgetting};
  DecayingRate step_rate_{kRateForgetting};  // engine thread only
  std::atomic<double> tokens_per_second_{0};  // step_rate_'s, for other threads

  // Pushes waiting for acknowledgement, finished by a few threads off the engine thread.
  struct Finishing {
    Work work;
    PrefillResult result;
    absl::Status failure;  // set: the push was abandoned; the job fails with this
  };
  const std::shared_ptr<PendingReleases> releases_ = std::make_shared<PendingReleases>();
  absl::Mutex finish_mu_;
  std::deque<Finishing> finishing_ ABSL_GUARDED_BY(finish_mu_);
  bool stopping_ ABSL_GUARDED_BY(finish_mu_) = false;
  std::vector<std::thread> finishers_;
};

}  // namespace baton::prefill_worker

#endif  // BATON_PREFILL_WORKER_PREFILL_SCHEDULER_H_
