#include "prefill_worker/prefill_scheduler.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "metrics/metrics.h"

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
    : transformer_(*transformer), cache_(*cache), transport_(*transport), options_(options) {
  Metrics();  // exported from the start
  for (int i = 0; i < options_.finisher_threads; ++i) {
    finishers_.emplace_back([this] { FinisherLoop(); });
  }
}

PrefillScheduler::~PrefillScheduler() {
  std::deque<std::shared_ptr<PrefillJob>> queued;
  {
    absl::MutexLock lock(&mu_);
    queued.swap(queue_);
  }
  for (auto& job : queued) job->done(absl::UnavailableError("prefill worker shutting down"));
  {
    absl::MutexLock lock(&finish_mu_);
    stopping_ = true;
  }
  for (std::thread& t : finishers_) t.join();
}

void PrefillScheduler::Enqueue(std::shared_ptr<PrefillJob> job) {
  queued_tokens_ += static_cast<int64_t>(job->prompt.size());
  absl::MutexLock lock(&mu_);
  queue_.push_back(std::move(job));
}

bool PrefillScheduler::Cancel(const std::string& request_id) {
  absl::MutexLock lock(&mu_);
  bool found = false;
  for (auto& job : queue_) {
    if (job->request_id == request_id) job->cancelled = found = true;
  }
  for (auto& job : running_) {
    if (job->request_id == request_id) job->cancelled = found = true;
  }
  return found;
}

std::vector<std::shared_ptr<PrefillJob>> PrefillScheduler::TakeBatch() {
  absl::MutexLock lock(&mu_);
  std::vector<std::shared_ptr<PrefillJob>> batch;
  int64_t tokens = 0;
  int32_t blocks_free = cache_.pool().n_free();
  while (!queue_.empty()) {
    const std::shared_ptr<PrefillJob>& job = queue_.front();
    const int64_t n = static_cast<int64_t>(job->prompt.size());
    const int32_t blocks = (static_cast<int32_t>(n) + cache_.block_size() - 1) / cache_.block_size();
    if (!batch.empty() && (tokens + n > options_.max_batch_tokens || blocks > blocks_free)) break;
    if (batch.empty() && blocks > blocks_free) break;  // wait for scratch blocks to free up
    tokens += n;
    blocks_free -= blocks;
    batch.push_back(job);
    queue_.pop_front();
  }
  running_ = batch;
  return batch;
}

bool PrefillScheduler::Step() {
  std::vector<std::shared_ptr<PrefillJob>> batch = TakeBatch();
  if (batch.empty()) return false;
  const auto start = SteadyClock::now();
  const engine::ModelConfig& config = transformer_.config();

  std::vector<Running> running;
  for (std::shared_ptr<PrefillJob>& job : batch) {
    queued_tokens_ -= static_cast<int64_t>(job->prompt.size());
    if (job->cancelled) {
      job->done(absl::CancelledError(absl::StrCat("request ", job->request_id, " cancelled")));
      continue;
    }
    Running r{.job = job};
    if (absl::Status s = cache_.Reserve(r.table, static_cast<int32_t>(job->prompt.size()));
        !s.ok()) {
      job->done(s);
      continue;
    }
    const kvtransfer::KvPushSpec spec{
        .reservation_id = job->reservation_id,
        .model_fingerprint = options_.model_fingerprint,
        .n_layer = config.n_layer,
        .kv_dim = config.kv_dim(),
        .block_size = cache_.block_size(),
        .n_tokens = static_cast<int32_t>(job->prompt.size()),
    };
    absl::StatusOr<std::unique_ptr<kvtransfer::KvPush>> push =
        transport_.StartPush(job->destination, spec, job->deadline);
    if (!push.ok()) {
      cache_.Free(r.table);
      job->done(push.status());
      continue;
    }
    r.push = std::move(*push);
    running.push_back(std::move(r));
  }
  if (running.empty()) {
    absl::MutexLock lock(&mu_);
    running_.clear();
    return true;
  }

  std::vector<engine::SequenceInput> inputs;
  for (Running& r : running) inputs.push_back({.tokens = r.job->prompt, .kv = &r.table});
  const auto push_start = SteadyClock::now();
  std::vector<const uint8_t*> blocks;
  absl::Status forward = transformer_.Prefill(inputs, logits_, [&](int32_t layer) {
    for (Running& r : running) {
      if (!r.status.ok()) continue;
      const int32_t n_blocks = static_cast<int32_t>(r.table.blocks.size());
      blocks.resize(n_blocks);
      for (int32_t b = 0; b < n_blocks; ++b) {
        blocks[b] = reinterpret_cast<const uint8_t*>(cache_.LayerBlock(layer, r.table.blocks[b]));
      }
      r.status = r.push->SendLayer(layer, blocks);
    }
  });
  const double prefill_seconds = SecondsBetween(start, SteadyClock::now());
  int64_t batch_tokens = 0;
  for (const Running& r : running) batch_tokens += static_cast<int64_t>(r.job->prompt.size());
  Metrics().batch_tokens.Observe(static_cast<double>(batch_tokens));
  Metrics().prefill_seconds.Observe(prefill_seconds);
  if (forward.ok()) Metrics().prompt_tokens.Increment(static_cast<double>(batch_tokens));
  for (size_t i = 0; i < running.size(); ++i) {
    Running& r = running[i];
    cache_.Free(r.table);
    if (r.status.ok()) r.status = forward;
    if (r.status.ok() && r.job->cancelled) {
      r.status = absl::CancelledError(absl::StrCat("request ", r.job->request_id, " cancelled"));
    }
    if (!r.status.ok()) {
      r.push->Cancel();
      r.job->done(r.status);
      continue;
    }
    const std::vector<engine::TokenId>& prompt = r.job->prompt;
    const engine::TokenId first = sampler_.Sample(
        r.job->params, {logits_.data() + i * config.n_vocab, static_cast<size_t>(config.n_vocab)},
        prompt, static_cast<int64_t>(prompt.size()));
    FinishLater(std::move(r), first, prefill_seconds, push_start);
  }
  absl::MutexLock lock(&mu_);
  running_.clear();
  return true;
}

void PrefillScheduler::FinishLater(Running running, engine::TokenId first_token,
                                   double prefill_seconds, SteadyClock::time_point push_start) {
  absl::MutexLock lock(&finish_mu_);
  finishing_.push_back({.running = std::move(running),
                        .result = {.first_token = first_token, .prefill_seconds = prefill_seconds},
                        .push_start = push_start});
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
    absl::StatusOr<kvtransfer::KvPushStats> stats = f.running.push->Finish();
    if (!stats.ok()) {
      f.running.job->done(stats.status());
      continue;
    }
    if (f.running.job->cancelled) {
      f.running.push->Cancel();
      f.running.job->done(absl::CancelledError("cancelled"));
      continue;
    }
    f.result.kv_bytes = stats->bytes_sent;
    f.result.kv_transfer_seconds = SecondsBetween(f.push_start, SteadyClock::now());
    Metrics().kv_transfer_seconds.Observe(f.result.kv_transfer_seconds);
    f.running.job->done(f.result);
  }
}

}  // namespace baton::prefill_worker
