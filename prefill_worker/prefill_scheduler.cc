#include "prefill_worker/prefill_scheduler.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "metrics/metrics.h"
#include "rpc/prefill_stage.h"

namespace baton::prefill_worker {
namespace {

using SteadyClock = std::chrono::steady_clock;

double SecondsBetween(SteadyClock::time_point a, SteadyClock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

struct PrefillMetrics {
  metrics::Histogram& batch_tokens;
  metrics::Histogram& prefill_seconds;
  metrics::Histogram& kv_transfer_seconds;
  metrics::Counter& prompt_tokens;
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
  };
  return m;
}

}  // namespace

PrefillScheduler::PrefillScheduler(engine::Transformer* transformer, engine::KvCache* cache,
                                   kvtransfer::KvTransport* transport,
                                   PrefillSchedulerOptions options)
    : transformer_(*transformer),
      cache_(*cache),
      transport_(*transport),
      options_(options),
      chunk_tokens_(std::max(1, options.max_batch_tokens / cache->block_size()) *
                    cache->block_size()) {
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
  for (Work& work : queued) Fail(work, absl::UnavailableError("prefill worker shutting down"));
  {
    absl::MutexLock lock(&finish_mu_);
    stopping_ = true;
  }
  for (std::thread& t : finishers_) t.join();
}

void PrefillScheduler::Enqueue(std::shared_ptr<PrefillJob> job) {
  queued_tokens_ += static_cast<int64_t>(job->prompt.size());
  absl::MutexLock lock(&mu_);
  Work work;
  work.job = std::move(job);
  queue_.push_back(std::move(work));
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
  if (work.n_prompt() <= options_.max_batch_tokens) return left;  // not chunked
  return std::min(left, chunk_tokens_);
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
    const int32_t piece = NextPiece(work);
    if (!batch.empty() && tokens + piece > options_.max_batch_tokens) {
      rest.push_back(std::move(work));
      break;
    }
    if (!work.started()) {
      const int32_t blocks = (work.n_prompt() + cache_.block_size() - 1) / cache_.block_size();
      if (new_work_waits || blocks > blocks_free) {
        new_work_waits = true;
        rest.push_back(std::move(work));
        continue;
      }
      blocks_free -= blocks;
    }
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

void PrefillScheduler::Fail(Work& work, const absl::Status& status) {
  if (work.push != nullptr) work.push->Cancel();
  cache_.Free(work.table);
  work.job->done(status);
}

bool PrefillScheduler::Start(Work& work) {
  const PrefillJob& job = *work.job;
  if (absl::Status s = cache_.Reserve(work.table, work.n_prompt()); !s.ok()) {
    Fail(work, s);
    return false;
  }
  const engine::ModelConfig& config = transformer_.config();
  const bool chunked = work.n_prompt() > options_.max_batch_tokens;
  const kvtransfer::KvPushSpec spec{
      .reservation_id = job.reservation_id,
      .model_fingerprint = options_.model_fingerprint,
      .n_layer = config.n_layer,
      .kv_dim = config.kv_dim(),
      .block_size = cache_.block_size(),
      .n_tokens = work.n_prompt(),
      .chunk_blocks = chunked ? chunk_tokens_ / cache_.block_size() : 0,
  };
  absl::StatusOr<std::unique_ptr<kvtransfer::KvPush>> push =
      transport_.StartPush(job.destination, spec, job.deadline);
  if (!push.ok()) {
    Fail(work, rpc::KvDestinationFault(push.status()));
    return false;
  }
  work.push = *std::move(push);
  work.push_start = SteadyClock::now();
  return true;
}

bool PrefillScheduler::Step() {
  std::vector<Work> batch = TakeBatch();
  if (batch.empty()) return false;
  const auto start = SteadyClock::now();
  const engine::ModelConfig& config = transformer_.config();

  std::vector<Work> running;
  for (Work& work : batch) {
    queued_tokens_ -= work.n_step;
    if (work.job->cancelled) {
      queued_tokens_ -= work.n_prompt() - work.n_done - work.n_step;
      Fail(work, absl::CancelledError(absl::StrCat("request ", work.job->request_id, " cancelled")));
      continue;
    }
    if (std::chrono::system_clock::now() > work.job->deadline) {
      queued_tokens_ -= work.n_prompt() - work.n_done - work.n_step;
      Fail(work, absl::DeadlineExceededError(absl::StrCat(
                     "request ", work.job->request_id, " passed its deadline after ",
                     work.n_done, " of ", work.n_prompt(), " prompt tokens")));
      continue;
    }
    if (!work.started() && !Start(work)) {
      queued_tokens_ -= work.n_prompt() - work.n_step;
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
                      .kv = &work.table});
  }
  std::vector<const uint8_t*> blocks;
  absl::Status forward = transformer_.Prefill(inputs, logits_, [&](int32_t layer) {
    // Each prompt's blocks that this step's tokens touch: its range of the push.
    for (Work& work : running) {
      if (!work.status.ok()) continue;
      const int32_t first = work.n_done / cache_.block_size();
      const int32_t end = (work.n_done + work.n_step + cache_.block_size() - 1) / cache_.block_size();
      blocks.resize(end - first);
      for (int32_t b = first; b < end; ++b) {
        blocks[b - first] =
            reinterpret_cast<const uint8_t*>(cache_.LayerBlock(layer, work.table.blocks[b]));
      }
      if (absl::Status sent = work.push->SendLayer(layer, blocks); !sent.ok()) {
        work.status = rpc::KvDestinationFault(std::move(sent));
      }
    }
  });
  const double step_seconds = SecondsBetween(start, SteadyClock::now());
  int64_t batch_tokens = 0;
  for (const Work& work : running) batch_tokens += work.n_step;
  Metrics().batch_tokens.Observe(static_cast<double>(batch_tokens));
  Metrics().prefill_seconds.Observe(step_seconds);
  if (forward.ok()) Metrics().prompt_tokens.Increment(static_cast<double>(batch_tokens));

  std::vector<Work> unfinished;
  for (size_t i = 0; i < running.size(); ++i) {
    Work& work = running[i];
    work.forward_seconds += step_seconds;
    work.n_done += work.n_step;
    if (work.status.ok()) work.status = forward;
    if (work.status.ok() && work.job->cancelled) {
      work.status =
          absl::CancelledError(absl::StrCat("request ", work.job->request_id, " cancelled"));
    }
    const int32_t left = work.n_prompt() - work.n_done;
    if (!work.status.ok()) {
      queued_tokens_ -= left;
      Fail(work, work.status);
      continue;
    }
    if (left > 0) {
      unfinished.push_back(std::move(work));
      continue;
    }
    cache_.Free(work.table);
    const std::vector<engine::TokenId>& prompt = work.job->prompt;
    const engine::TokenId first = sampler_.Sample(
        work.job->params,
        {logits_.data() + i * config.n_vocab, static_cast<size_t>(config.n_vocab)}, prompt,
        static_cast<int64_t>(prompt.size()));
    if (work.job->forward_done) work.job->forward_done();
    FinishLater(std::move(work), first);
  }
  absl::MutexLock lock(&mu_);
  running_.clear();
  // Part-way prompts go to the back of the queue (the no-starvation rule in the header).
  for (Work& work : unfinished) queue_.push_back(std::move(work));
  return true;
}

void PrefillScheduler::FinishLater(Work work, engine::TokenId first_token) {
  const double prefill_seconds = work.forward_seconds;
  absl::MutexLock lock(&finish_mu_);
  finishing_.push_back(
      {.work = std::move(work),
       .result = {.first_token = first_token, .prefill_seconds = prefill_seconds}});
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
    absl::StatusOr<kvtransfer::KvPushStats> stats = f.work.push->Finish();
    if (!stats.ok()) {
      job.done(rpc::KvDestinationFault(stats.status()));
      continue;
    }
    if (job.cancelled) {
      f.work.push->Cancel();
      job.done(absl::CancelledError("cancelled"));
      continue;
    }
    f.result.kv_bytes = stats->bytes_sent;
    f.result.kv_transfer_seconds = SecondsBetween(f.work.push_start, SteadyClock::now());
    Metrics().kv_transfer_seconds.Observe(f.result.kv_transfer_seconds);
    job.done(f.result);
  }
}

}  // namespace baton::prefill_worker
