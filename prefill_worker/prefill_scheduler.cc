#include "prefill_worker/prefill_scheduler.h"

#include <algorithm>
#include <span>
#include <vector>

#include "absl/log/check.h"
#include "absl/strings/str_cat.h"
#include "base/log.h"
#include "metrics/metrics.h"
#include "metrics/prefix_cache_metrics.h"
#include "rpc/prefill_stage.h"

namespace baton::prefill_worker {
namespace {

// Each layer's sliding window (0: none), as a KV push states them.
std::vector<int32_t> LayerWindows(const engine::KvCache& cache) {
  std::vector<int32_t> windows(cache.n_layer());
  for (int32_t layer = 0; layer < cache.n_layer(); ++layer) windows[layer] = cache.window(layer);
  return windows;
}

using SteadyClock = std::chrono::steady_clock;

// How long a scheduler that goes waits for the network to let go of its pushes' blocks: past a
// connection's keepalive and a cut-off peer's TCP timeout, as a rule.
constexpr absl::Duration kShutdownReleaseWait = absl::Seconds(60);

double SecondsBetween(SteadyClock::time_point a, SteadyClock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

struct PrefillMetrics {
  metrics::Histogram& batch_tokens;
  metrics::Histogram& prefill_seconds;
  metrics::Histogram& kv_transfer_seconds;
  metrics::Counter& prompt_tokens;
  metrics::Counter& cached_tokens;
};

const PrefillMetrics& Metrics() {
  metrics::Registry& r = metrics::Registry::Global();
  static const PrefillMetrics m{
      .batch_tokens = r.GetHistogram("baton:prefill_batch_tokens",
                                     "Prompt tokens per prefill forward pass.",
                                     metrics::CountBuckets(1 << 17)),
      .prefill_seconds = r.GetHistogram("baton:prefill_seconds",
                                        "Duration of one prefill forward pass (a batch).",
                                        metrics::LatencyBuckets()),
      .kv_transfer_seconds = r.GetHistogram(
          "baton:kv_transfer_seconds",
          "Per request: from the start of its KV push to the decode worker's acknowledgement.",
          metrics::LatencyBuckets()),
      .prompt_tokens = r.GetCounter("baton:prompt_tokens_total", "Prompt tokens prefilled."),
      .cached_tokens = r.GetCounter(
          "baton:prefill_cached_tokens_total",
          "Prompt tokens not prefilled because the prefix cache held their KV (prefill saved)."),
  };
  return m;
}

}  // namespace

PrefillScheduler::PrefillScheduler(engine::ForwardPass* transformer, engine::KvCache* cache,
                                   kvtransfer::KvTransport* transport,
                                   PrefillSchedulerOptions options)
    : transformer_(*transformer),
      cache_(*cache),
      transport_(*transport),
      options_(options),
      chunk_tokens_(std::max(1, options.max_batch_tokens / cache->block_size()) *
                    cache->block_size()) {
  if (!cache_.backend().host_memory()) {
    staging_ = std::make_unique<HostStagingPool>(cache_.backend(),
                                                 options_.host_staging_idle_bytes);
  }
  {
    absl::MutexLock lock(&releases_->mu);
    releases_->owner = this;
  }
  Metrics();  // exported from the start
  for (int i = 0; i < options_.finisher_threads; ++i) {
    finishers_.emplace_back([this] { FinisherLoop(); });
  }
}

PrefillScheduler::~PrefillScheduler() {
  std::deque<Work> queued;
  {
    absl::MutexLock lock(&mu_);
    queued.swap(queue_);
  }
  for (Work& work : queued) {
    Fail(std::move(work), absl::UnavailableError("prefill worker shutting down"));
  }
  {
    absl::MutexLock lock(&finish_mu_);
    stopping_ = true;
  }
  for (std::thread& t : finishers_) t.join();
  // Scratch blocks the network still holds views of come back when their connections let go;
  // after the bound the cache may go while a view is left (logged), and a late release is
  // ignored.
  absl::MutexLock lock(&releases_->mu);
  auto released = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(releases_->mu) {
    return releases_->pending == 0;
  };
  if (!releases_->mu.AwaitWithTimeout(absl::Condition(&released), kShutdownReleaseWait)) {
    BATON_LOG(ERROR) << releases_->pending << " KV pushes still hold scratch blocks at shutdown";
  }
  releases_->owner = nullptr;
}

void PrefillScheduler::Enqueue(std::shared_ptr<PrefillJob> job) {
  Work work;
  work.job = std::move(job);
  if (UsesPrefixCache(work)) {
    work.n_cached_at_arrival = options_.prefix_cache->CachedTokens(
        work.job->prompt, engine::MaxCachedTokens(work.n_prompt(), cache_.block_size()),
        work.job->cache_salt);
  }
  const int64_t uncached = work.n_prompt() - work.n_cached_at_arrival;
  queued_tokens_ += uncached;
  absl::MutexLock lock(&mu_);
  arriving_tokens_.Add(static_cast<double>(uncached), absl::Now());
  tokens_per_prompt_.Observe(static_cast<double>(uncached), 1);
  queue_.push_back(std::move(work));
}

PrefillScheduler::Arrivals PrefillScheduler::arrivals() const {
  absl::MutexLock lock(&mu_);
  return {.tokens_per_second = arriving_tokens_.PerSecond(absl::Now()),
          .tokens_per_prompt = tokens_per_prompt_.PerSecond()};
}

bool PrefillScheduler::Cancel(const std::string& request_id) {
  absl::MutexLock lock(&mu_);
  bool found = false;
  for (Work& work : queue_) {
    if (work.job->request_id == request_id) work.job->cancelled = found = true;
  }
  for (auto& job : running_) {
    if (job->request_id == request_id) job->cancelled = found = true;
  }
  return found;
}

int32_t PrefillScheduler::NextPiece(const Work& work) const {
  const int32_t left = work.n_prompt() - work.n_done;
  if (work.chunk_tokens == 0) return left;  // not chunked
  const int32_t range_end = (work.n_done / work.chunk_tokens + 1) * work.chunk_tokens;
  return std::min(left, range_end - work.n_done);
}

bool PrefillScheduler::UsesPrefixCache(const Work& work) const {
  return options_.prefix_cache != nullptr && options_.prefix_cache->enabled() &&
         !work.wants_prompt_logprobs();
}

void PrefillScheduler::MatchPrefix(Work& work) {
  work.matched = true;
  if (UsesPrefixCache(work)) {
    work.n_cached = options_.prefix_cache->Match(
        work.job->prompt, engine::MaxCachedTokens(work.n_prompt(), cache_.block_size()),
        work.table, work.job->cache_salt);
    metrics::RecordPrefixLookup(work.n_prompt(), work.n_cached, cache_.block_size());
    Metrics().cached_tokens.Increment(work.n_cached);
    work.n_done = work.n_cached;
    queued_tokens_ -= work.n_cached - work.n_cached_at_arrival;
  }
  // A prompt longer than the budget is chunked; one with prompt log-probabilities also when its
  // logits would pass their bound.
  const bool capped = work.wants_prompt_logprobs();
  const int32_t chunk = capped ? PromptLogprobsChunkTokens() : chunk_tokens_;
  const int32_t limit = capped ? std::min(options_.max_batch_tokens, chunk)
                               : options_.max_batch_tokens;
  work.chunk_tokens = work.n_prompt() - work.n_done > limit ? chunk : 0;
}

int32_t PrefillScheduler::PromptLogprobsChunkTokens() const {
  const int64_t rows = options_.max_prompt_logit_floats / transformer_.config().n_vocab;
  const int64_t blocks = std::max<int64_t>(1, rows / cache_.block_size());
  return static_cast<int32_t>(std::min<int64_t>(blocks * cache_.block_size(), chunk_tokens_));
}

std::vector<PrefillScheduler::Work> PrefillScheduler::TakeBatch() {
  absl::MutexLock lock(&mu_);
  std::vector<Work> batch;
  std::deque<Work> rest;
  int64_t tokens = 0;
  int32_t blocks_free = cache_.pool().n_free();
  bool new_work_waits = false;  // a new prompt found no scratch blocks: later new ones wait too
  while (!queue_.empty()) {
    Work work = std::move(queue_.front());
    queue_.pop_front();
    // Blocks a new prompt takes from the free ones at most: what its table lacks before the
    // prefix match (a match takes cached blocks, which count as free while nobody holds them).
    const int32_t blocks = work.started() ? 0 : cache_.BlocksNeeded(work.table, work.n_prompt());
    if (!work.started()) {
      if (new_work_waits || blocks > blocks_free) {
        new_work_waits = true;
        rest.push_back(std::move(work));
        continue;
      }
      if (!work.matched) MatchPrefix(work);
    }
    const int32_t piece = NextPiece(work);
    if (!batch.empty() && tokens + piece > options_.max_batch_tokens) {
      rest.push_back(std::move(work));
      break;
    }
    blocks_free -= blocks;
    work.n_step = piece;
    tokens += piece;
    batch.push_back(std::move(work));
  }
  while (!queue_.empty()) {
    rest.push_back(std::move(queue_.front()));
    queue_.pop_front();
  }
  queue_.swap(rest);
  running_.clear();
  for (const Work& work : batch) running_.push_back(work.job);
  return batch;
}

void PrefillScheduler::Fail(Work work, absl::Status status) {
  if (work.push == nullptr) {
    cache_.Free(work.table);
    work.job->done(status);
    return;
  }
  // The network may still hold views of the blocks for a while: a finisher frees them.
  work.push->Cancel();
  absl::MutexLock lock(&finish_mu_);
  finishing_.push_back({.work = std::move(work), .failure = std::move(status)});
}

absl::Status PrefillScheduler::Start(Work& work) {
  const PrefillJob& job = *work.job;
  if (absl::Status s = cache_.Reserve(work.table, work.n_prompt()); !s.ok()) return s;
  const engine::ModelConfig& config = transformer_.config();
  const kvtransfer::KvPushSpec spec{
      .reservation_id = job.reservation_id,
      .model_fingerprint = options_.model_fingerprint,
      .n_layer = config.n_layer,
      .kv_dim = config.kv_dim(),
      .kv_planes = config.kv_planes(),
      .block_size = cache_.block_size(),
      .n_tokens = work.n_prompt(),
      .chunk_blocks = work.chunk_tokens / cache_.block_size(),
      .first_block = job.destination_cached_blocks,
      .layer_windows = LayerWindows(cache_),
  };
  absl::StatusOr<std::unique_ptr<kvtransfer::KvPush>> push =
      transport_.StartPush(job.destination, spec, job.deadline);
  if (!push.ok()) return rpc::KvDestinationFault(push.status());
  work.push = *std::move(push);
  work.push_spec = spec;
  work.next_send_block = spec.first_block;
  work.push_start = SteadyClock::now();
  if (absl::Status sent = SendCachedRanges(work); !sent.ok()) {
    return PushFailure(work, std::move(sent));
  }
  return absl::OkStatus();
}

absl::Status PrefillScheduler::SendCachedRanges(Work& work) {
  const int32_t cached_blocks = work.n_cached / cache_.block_size();
  while (work.next_send_block < cached_blocks &&
         work.push_spec.RangeEnd(work.next_send_block) <= cached_blocks) {
    const int32_t end = work.push_spec.RangeEnd(work.next_send_block);
    for (int32_t layer = 0; layer < cache_.n_layer(); ++layer) {
      if (absl::Status sent = SendLayerUpTo(work, layer, end); !sent.ok()) return sent;
    }
    work.next_send_block = end;
  }
  return absl::OkStatus();
}

absl::Status PrefillScheduler::SendLayerUpTo(Work& work, int32_t layer, int32_t end_block) {
  // Blocks before it the receiver has, or (a windowed layer) does not keep.
  const int32_t begin = std::max(work.next_send_block, work.push_spec.LayerFirstBlock(layer));
  if (begin >= end_block) return absl::OkStatus();
  if (options_.kv_shards != nullptr) return SendAssembledLayer(work, layer, begin, end_block);
  std::vector<const uint8_t*> blocks;
  blocks.reserve(end_block - begin);
  for (int32_t b = begin; b < end_block; ++b) {
    blocks.push_back(reinterpret_cast<const uint8_t*>(cache_.LayerBlock(layer, work.table, b)));
  }
  if (staging_ == nullptr) return work.push->SendLayer(layer, blocks);
  if (work.push->reads_device_memory()) return SendDeviceLayer(work, layer, blocks);
  return SendStagedLayer(work, layer, blocks);
}

absl::Status PrefillScheduler::SendDeviceLayer(Work& work, int32_t layer,
                                               const std::vector<const uint8_t*>& blocks) {
  // The layer's KV is computed once what the device has queued so far is done.
  std::shared_ptr<kernels::CopyFence> computed = cache_.backend().CopyToHostAsync({});
  auto ready = [failed = work.staging_failed, computed](
                   std::chrono::system_clock::time_point deadline) {
    absl::Status landed = computed->Wait(absl::FromChrono(deadline));
    if (!landed.ok()) failed->store(true);
    return landed;
  };
  return work.push->SendLayer(layer, blocks, std::move(ready));
}

absl::Status PrefillScheduler::SendStagedLayer(Work& work, int32_t layer,
                                               const std::vector<const uint8_t*>& blocks) {
  const size_t block_bytes =
      static_cast<size_t>(cache_.layer_block_elements()) * sizeof(uint16_t);
  absl::StatusOr<std::unique_ptr<StagedLayer>> staged = staging_->Stage(blocks, block_bytes);
  if (!staged.ok()) {
    work.staging_failed->store(true);
    return staged.status();
  }
  const StagedLayer& copy = *work.staged.emplace_back(*std::move(staged));
  auto ready = [failed = work.staging_failed, wait = copy.ready()](
                   std::chrono::system_clock::time_point deadline) {
    absl::Status landed = wait(deadline);
    if (!landed.ok()) failed->store(true);
    return landed;
  };
  return work.push->SendLayer(layer, copy.blocks(), std::move(ready));
}

absl::Status PrefillScheduler::SendAssembledLayer(Work& work, int32_t layer, int32_t begin,
                                                  int32_t end) {
  const engine::KvShards& shards = *options_.kv_shards;
  const int64_t bytes = shards.layer_block_bytes();
  const std::vector<engine::BlockId>& ids = work.table.groups[cache_.groups().group_of[layer]];
  uint8_t* copy =
      work.assembled.emplace_back(new uint8_t[static_cast<size_t>(bytes * (end - begin))]).get();
  std::vector<const uint8_t*> blocks;
  for (int32_t b = begin; b < end; ++b) {
    uint8_t* block = copy + (b - begin) * bytes;
    shards.Assemble(layer, ids[b], block);
    blocks.push_back(block);
  }
  return work.push->SendLayer(layer, blocks);
}

absl::Status PrefillScheduler::PushFailure(const Work& work, absl::Status status) {
  if (work.staging_failed->load()) return status;
  return rpc::KvDestinationFault(std::move(status));
}

bool PrefillScheduler::Step() {
  std::vector<Work> batch = TakeBatch();
  if (batch.empty()) return false;
  const auto start = SteadyClock::now();
  const engine::ModelConfig& config = transformer_.config();

  std::vector<Work> running;
  for (Work& work : batch) {
    absl::Status ready;
    if (work.job->cancelled) {
      ready = absl::CancelledError(absl::StrCat("request ", work.job->request_id, " cancelled"));
    } else if (std::chrono::system_clock::now() > work.job->deadline) {
      ready = absl::DeadlineExceededError(
          absl::StrCat("request ", work.job->request_id, " passed its deadline after ",
                       work.n_done, " of ", work.n_prompt(), " prompt tokens"));
    } else if (!work.started()) {
      ready = Start(work);
    }
    if (!ready.ok()) {
      queued_tokens_ -= work.n_prompt() - work.n_done;
      Fail(std::move(work), std::move(ready));
      continue;
    }
    running.push_back(std::move(work));
  }
  if (running.empty()) {
    absl::MutexLock lock(&mu_);
    running_.clear();
    return true;
  }

  std::vector<engine::SequenceInput> inputs;
  for (Work& work : running) {
    inputs.push_back({.tokens = std::span<const engine::TokenId>(work.job->prompt)
                                    .subspan(work.n_done, work.n_step),
                      .kv = &work.table,
                      .all_logits = work.wants_prompt_logprobs()});
  }
  auto step_end_block = [&](const Work& work) {
    return (work.n_done + work.n_step + cache_.block_size() - 1) / cache_.block_size();
  };
  absl::Status forward = transformer_.Prefill(inputs, logits_, [&](int32_t layer) {
    // Each prompt's blocks up to the end of this step's tokens, from the first not sent: one
    // range of its push (the step's chunk ends where a range ends).
    for (Work& work : running) {
      if (!work.status.ok()) continue;
      if (absl::Status sent = SendLayerUpTo(work, layer, step_end_block(work)); !sent.ok()) {
        work.status = PushFailure(work, std::move(sent));
      }
    }
  });
  const double step_seconds = SecondsBetween(start, SteadyClock::now());
  int64_t batch_tokens = 0;
  for (const Work& work : running) batch_tokens += work.n_step;
  Metrics().batch_tokens.Observe(static_cast<double>(batch_tokens));
  Metrics().prefill_seconds.Observe(step_seconds);
  if (forward.ok()) {
    Metrics().prompt_tokens.Increment(static_cast<double>(batch_tokens));
    step_rate_.Observe(static_cast<double>(batch_tokens), step_seconds);
    tokens_per_second_ = step_rate_.PerSecond();
  }

  std::vector<Work> unfinished;
  float* rows = logits_.data();  // the next work's logits: one row, or one per token
  for (size_t i = 0; i < running.size(); ++i) {
    Work& work = running[i];
    const float* work_rows = rows;
    rows += static_cast<size_t>(work.wants_prompt_logprobs() ? work.n_step : 1) * config.n_vocab;
    if (forward.ok() && work.status.ok() && work.wants_prompt_logprobs()) {
      AppendPromptLogprobs(work, work_rows);
    }
    work.forward_seconds += step_seconds;
    work.next_send_block = std::max(work.next_send_block, step_end_block(work));
    // The step's tokens counted as queued until its pass ended: a prompt arriving during it
    // waits for it.
    queued_tokens_ -= work.n_step;
    work.n_done += work.n_step;
    if (work.status.ok()) work.status = forward;
    if (work.status.ok() && work.job->cancelled) {
      work.status =
          absl::CancelledError(absl::StrCat("request ", work.job->request_id, " cancelled"));
    }
    const int32_t left = work.n_prompt() - work.n_done;
    if (!work.status.ok()) {
      queued_tokens_ -= left;
      absl::Status failure = work.status;
      Fail(std::move(work), std::move(failure));
      continue;
    }
    if (options_.prefix_cache != nullptr) {
      options_.prefix_cache->Publish(work.job->prompt, work.table, work.job->cache_salt);
    }
    if (left > 0) {
      // The windowed layers let go of the blocks their window has passed (published ones stay
      // in the prefix cache); nothing is taken, so this cannot fail.
      CHECK(cache_.Reserve(work.table, work.n_prompt()).ok());
      unfinished.push_back(std::move(work));
      continue;
    }
    const std::vector<engine::TokenId>& prompt = work.job->prompt;
    const std::span<float> logits(rows - config.n_vocab, static_cast<size_t>(config.n_vocab));
    grammar::OutputMatcher* matcher = work.job->output_matcher.get();
    if (matcher != nullptr && !matcher->MaskLogits(logits)) {
      Fail(std::move(work), absl::FailedPreconditionError(
                                "the output constraint allows no first token (a dead end of its "
                                "grammar)"));
      continue;
    }
    engine::DrawnToken first = engine::DrawToken(sampler_, work.job->params, logits, prompt,
                                                 static_cast<int64_t>(prompt.size()));
    PrefillResult result{.first_token = first.token,
                         .first_token_logprobs = std::move(first.logprobs),
                         .prompt_logprobs = std::move(work.prompt_logprobs),
                         .prefill_seconds = work.forward_seconds,
                         .cached_tokens = work.n_cached};
    if (work.job->forward_done) work.job->forward_done();
    FinishLater(std::move(work), std::move(result));
  }
  // A step with every prompt position's logits leaves a large buffer: it is not kept.
  if (logits_.size() > running.size() * static_cast<size_t>(config.n_vocab)) logits_ = {};
  absl::MutexLock lock(&mu_);
  running_.clear();
  // Part-way prompts go to the back of the queue (the no-starvation rule in the header).
  for (Work& work : unfinished) queue_.push_back(std::move(work));
  return true;
}

void PrefillScheduler::AppendPromptLogprobs(Work& work, const float* rows) const {
  const int32_t n_vocab = transformer_.config().n_vocab;
  const std::vector<engine::TokenId>& prompt = work.job->prompt;
  for (int32_t j = 0; j < work.n_step; ++j) {
    const int32_t predicted = work.n_done + j + 1;  // the prompt position row j predicts
    if (predicted >= work.n_prompt()) break;        // the last row predicts the first token
    const std::span<const float> row(rows + static_cast<size_t>(j) * n_vocab,
                                     static_cast<size_t>(n_vocab));
    work.prompt_logprobs.push_back(
        engine::LogprobsOf(row, prompt[predicted], work.job->params.prompt_logprobs));
  }
}

void PrefillScheduler::FinishLater(Work work, PrefillResult result) {
  absl::MutexLock lock(&finish_mu_);
  finishing_.push_back({.work = std::move(work), .result = std::move(result)});
}

void PrefillScheduler::ReleaseScratch(Work& work) {
  {
    absl::MutexLock lock(&releases_->mu);
    ++releases_->pending;
  }
  // The blocks (and their host copies) go back once the transport lets go of them, maybe on a
  // transport thread after this work is gone: the callback owns them.
  auto scratch = std::make_shared<Scratch>(
      Scratch{std::move(work.table), std::move(work.staged), std::move(work.assembled)});
  work.push->WhenBlocksReleased([releases = releases_, scratch] {
    absl::MutexLock lock(&releases->mu);
    if (releases->owner != nullptr) {
      releases->owner->FreeScratch(*scratch);
    } else {
      // Past the scheduler's shutdown wait: its pools are gone; the process is ending.
      for (std::unique_ptr<StagedLayer>& staged : scratch->staged) staged.release();
    }
    --releases->pending;
  });
}

void PrefillScheduler::FreeScratch(Scratch& scratch) {
  cache_.Free(scratch.table);  // the pool is thread-safe; the table is this callback's
  scratch.staged.clear();
  scratch.assembled.clear();
  options_.blocks_freed();
}

void PrefillScheduler::FinisherLoop() {
  while (true) {
    Finishing f;
    {
      absl::MutexLock lock(&finish_mu_);
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(finish_mu_) {
        return stopping_ || !finishing_.empty();
      };
      finish_mu_.Await(absl::Condition(&ready));
      if (finishing_.empty()) return;  // stopping, nothing left
      f = std::move(finishing_.front());
      finishing_.pop_front();
    }
    PrefillJob& job = *f.work.job;
    if (!f.failure.ok()) {
      ReleaseScratch(f.work);
      job.done(f.failure);
      continue;
    }
    absl::StatusOr<kvtransfer::KvPushStats> stats = f.work.push->Finish();
    ReleaseScratch(f.work);
    if (!stats.ok()) {
      job.done(PushFailure(f.work, stats.status()));
      continue;
    }
    if (job.cancelled) {
      f.work.push->Cancel();
      job.done(absl::CancelledError("cancelled"));
      continue;
    }
    f.result.kv_bytes = stats->bytes_sent;
    f.result.kv_transfer_seconds = SecondsBetween(f.work.push_start, SteadyClock::now());
    f.result.kv_transport = std::string(f.work.push->transport_name());
    Metrics().kv_transfer_seconds.Observe(f.result.kv_transfer_seconds);
    metrics::Registry& registry = metrics::Registry::Global();
    const metrics::Labels by_transport = {{"transport", f.result.kv_transport}};
    registry.GetCounter("baton:kv_pushes_total", "KV pushes acknowledged, by transport.",
                        by_transport).Increment();
    registry.GetCounter("baton:kv_pushed_bytes_total",
                        "KV bytes pushed and acknowledged, by transport.", by_transport)
        .Increment(static_cast<double>(f.result.kv_bytes));
    job.done(std::move(f.result));
  }
}

}  // namespace baton::prefill_worker
