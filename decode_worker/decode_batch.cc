#include "decode_worker/decode_batch.h"

#include <algorithm>
#include <chrono>
#include <span>
#include <utility>

#include "absl/log/check.h"
#include "absl/strings/str_cat.h"
#include "metrics/metrics.h"

namespace baton::decode_worker {
namespace {

metrics::Histogram& BatchSizeHistogram() {
  static metrics::Histogram& h = metrics::Registry::Global().GetHistogram(
      "baton:batch_size", "Sequences per decode step.", metrics::ExponentialBuckets(1, 2, 13));
  return h;
}

metrics::Counter& PreemptionCounter() {
  static metrics::Counter& c = metrics::Registry::Global().GetCounter(
      "baton:num_preemptions_total",
      "Sequences preempted for lack of KV blocks (recomputed later).");
  return c;
}

// Speculative decoding, under vLLM's names.
struct SpeculationMetrics {
  metrics::Counter& drafts;
  metrics::Counter& draft_tokens;
  metrics::Counter& accepted_tokens;
  metrics::Gauge& acceptance_rate;
  metrics::Gauge& token_cost;
};

SpeculationMetrics& Speculation() {
  static SpeculationMetrics m{
      metrics::Registry::Global().GetCounter(
          "baton:spec_decode_num_drafts_total",
          "Verifications of a sequence's proposed tokens (one per sequence and step)."),
      metrics::Registry::Global().GetCounter("baton:spec_decode_num_draft_tokens_total",
                                             "Tokens proposed and verified."),
      metrics::Registry::Global().GetCounter("baton:spec_decode_num_accepted_tokens_total",
                                             "Proposed tokens the target model kept."),
      metrics::Registry::Global().GetGauge(
          "baton:spec_decode_draft_acceptance_rate",
          "Accepted over proposed tokens since the worker started (0 before any)."),
      metrics::Registry::Global().GetGauge(
          "baton:spec_decode_token_cost",
          "One proposed token's cost relative to a decode step, as the last step planned it."),
  };
  return m;
}

}  // namespace

DecodeBatch::DecodeBatch(const engine::Tokenizer* tokenizer, engine::ForwardPass* transformer,
                         engine::KvCache* cache, DecodeBatchOptions options)
    : tokenizer_(*tokenizer),
      transformer_(*transformer),
      cache_(*cache),
      options_(options),
      samplers_(std::max(1, cache->backend().host_threads())) {
  BatchSizeHistogram();  // exported from the start, empty
  PreemptionCounter();   // and 0
  if (options_.speculation.proposer != nullptr) Speculation().token_cost.Set(TokenCost());
}

DecodeBatch::~DecodeBatch() {
  for (DecodeSequence& seq : running_) cache_.Free(seq.table);
  for (DecodeSequence& seq : preempted_) cache_.Free(seq.table);
  absl::MutexLock lock(&mu_);
  for (DecodeSequence& seq : admitted_) cache_.Free(seq.table);
}

void DecodeBatch::Admit(DecodeSequence sequence) {
  absl::MutexLock lock(&mu_);
  sequence.arrival = next_arrival_++;
  live_ids_.insert(sequence.id);
  admitted_.push_back(std::move(sequence));
}

bool DecodeBatch::Cancel(const std::string& id) {
  absl::MutexLock lock(&mu_);
  if (!live_ids_.contains(id)) return false;
  cancelled_.push_back(id);
  return true;
}

void DecodeBatch::EndAll(const absl::Status& why) {
  absl::MutexLock lock(&mu_);
  end_all_ = why;
}

int32_t DecodeBatch::n_waiting() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int32_t>(admitted_.size()) + n_preempted_.load();
}

void DecodeBatch::ReleaseBlocks(DecodeSequence& seq) {
  if (options_.prefix_cache != nullptr) {
    options_.prefix_cache->Publish(seq.tokens, seq.table, seq.cache_salt);
  }
  cache_.Free(seq.table);
}

void DecodeBatch::Finish(DecodeSequence& seq, engine::FinishReason finish,
                         const absl::Status& error) {
  ReleaseBlocks(seq);
  if (options_.speculation.proposer != nullptr) options_.speculation.proposer->Forget(seq.arrival);
  {
    absl::MutexLock lock(&mu_);
    live_ids_.erase(seq.id);
  }
  if (seq.sink) {
    const int32_t n_generated = static_cast<int32_t>(seq.tokens.size()) - seq.n_prompt;
    seq.sink->OnEnd(finish, n_generated, seq.counts, error);
  }
}

void DecodeBatch::TakeArrivalsAndCancellations() {
  std::vector<std::string> cancelled;
  std::optional<absl::Status> end_all;
  {
    absl::MutexLock lock(&mu_);
    for (DecodeSequence& seq : admitted_) running_.push_back(std::move(seq));
    admitted_.clear();
    cancelled.swap(cancelled_);
    end_all.swap(end_all_);
  }
  auto finish_if = [&](std::vector<DecodeSequence>& list, auto should_finish,
                       engine::FinishReason finish, const absl::Status& status) {
    for (auto it = list.begin(); it != list.end();) {
      if (should_finish(*it)) {
        Finish(*it, finish, status);
        it = list.erase(it);
      } else {
        ++it;
      }
    }
  };
  auto is_cancelled = [&](const DecodeSequence& seq) {
    return std::find(cancelled.begin(), cancelled.end(), seq.id) != cancelled.end();
  };
  if (!cancelled.empty()) {
    const absl::Status status = absl::CancelledError("cancelled");
    finish_if(running_, is_cancelled, engine::FinishReason::kNone, status);
    finish_if(preempted_, is_cancelled, engine::FinishReason::kNone, status);
  }
  if (end_all.has_value()) {
    auto every = [](const DecodeSequence&) { return true; };
    finish_if(running_, every, engine::FinishReason::kNone, *end_all);
    finish_if(preempted_, every, engine::FinishReason::kNone, *end_all);
  }
  // Admitted with nothing left to generate (max_tokens reached by the first token).
  finish_if(
      running_,
      [](const DecodeSequence& seq) {
        return static_cast<int32_t>(seq.tokens.size()) - seq.n_prompt >= seq.params.max_tokens;
      },
      engine::FinishReason::kLength, absl::OkStatus());
}

void DecodeBatch::Preempt(size_t index) {
  DecodeSequence seq = std::move(running_[index]);
  running_.erase(running_.begin() + index);
  ReleaseBlocks(seq);
  if (options_.speculation.proposer != nullptr) options_.speculation.proposer->Forget(seq.arrival);
  auto pos = std::upper_bound(
      preempted_.begin(), preempted_.end(), seq.arrival,
      [](uint64_t arrival, const DecodeSequence& other) { return arrival < other.arrival; });
  preempted_.insert(pos, std::move(seq));
  ++n_preemptions_;
  PreemptionCounter().Increment();
}

void DecodeBatch::ResumePreempted() {
  while (!preempted_.empty()) {
    DecodeSequence& seq = preempted_.front();
    // Room for every token, the next one included, plus one block for each running sequence so
    // that resuming does not at once force another preemption.
    const int32_t n_tokens = static_cast<int32_t>(seq.tokens.size());
    const int32_t needed = cache_.BlocksNeeded(seq.table, n_tokens);
    if (needed > cache_.pool().n_blocks()) {
      Finish(seq, engine::FinishReason::kNone,
             absl::ResourceExhaustedError(absl::StrCat(
                 "sequence of ", n_tokens, " tokens needs ", needed, " KV blocks; the cache has ",
                 cache_.pool().n_blocks())));
      preempted_.erase(preempted_.begin());
      continue;
    }
    if (needed + static_cast<int32_t>(running_.size()) > cache_.pool().n_free()) return;
    // Recompute the KV of every token but the last, which the next decode step feeds, after the
    // blocks the prefix cache still holds (those published when it was preempted).
    if (options_.prefix_cache != nullptr) {
      options_.prefix_cache->Match(seq.tokens,
                                   engine::MaxCachedTokens(n_tokens, cache_.block_size()),
                                   seq.table, seq.cache_salt);
    }
    if (!cache_.Reserve(seq.table, n_tokens).ok()) {
      cache_.Free(seq.table);
      return;
    }
    absl::Status status;
    if (seq.table.n_tokens < n_tokens - 1) {
      engine::SequenceInput input{
          .tokens = std::span<const engine::TokenId>(seq.tokens)
                        .subspan(seq.table.n_tokens, n_tokens - 1 - seq.table.n_tokens),
          .kv = &seq.table};
      status = transformer_.Prefill({&input, 1}, logits_);
    }
    if (!status.ok()) {
      Finish(seq, engine::FinishReason::kNone, status);
    } else {
      running_.push_back(std::move(seq));
    }
    preempted_.erase(preempted_.begin());
  }
}

size_t DecodeBatch::MakeRoom(size_t n) {
  size_t i = 0;
  while (i < std::min(n, running_.size())) {
    DecodeSequence& seq = running_[i];
    if (cache_.Reserve(seq.table, static_cast<int32_t>(seq.tokens.size())).ok()) {
      ++i;
      continue;
    }
    // Out of blocks: preempt the youngest running sequence (possibly this one) and retry.
    size_t youngest = 0;
    for (size_t j = 1; j < running_.size(); ++j) {
      if (running_[j].arrival > running_[youngest].arrival) youngest = j;
    }
    Preempt(youngest);
    if (youngest < i) --i;  // an earlier, already served sequence left the front
  }
  return std::min(n, running_.size());
}

std::vector<DecodeBatch::StepEntry> DecodeBatch::PlanStep(size_t n) {
  std::vector<StepEntry> entries(n);
  for (size_t i = 0; i < n; ++i) {
    entries[i].fed = {running_[i].tokens.back()};
    entries[i].blocks_before = running_[i].table.n_blocks();
  }
  const SpeculationOptions& spec = options_.speculation;
  if (spec.proposer == nullptr || n > static_cast<size_t>(spec.disable_batch_size)) return entries;
  const double step_token_cost = TokenCost();
  Speculation().token_cost.Set(step_token_cost);
  const double token_cost = BatchTokenCost(step_token_cost, static_cast<int64_t>(n));
  std::vector<engine::ProposalRequest> requests;
  std::vector<size_t> asking;
  for (size_t i = 0; i < n; ++i) {
    DecodeSequence& seq = running_[i];
    if (!seq.params.speculative) continue;
    const int32_t n_tokens = static_cast<int32_t>(seq.tokens.size());
    // Every token a step yields must be wanted: proposals past max_tokens or the context are not.
    const int32_t left = std::min(seq.params.max_tokens - (n_tokens - seq.n_prompt),
                                  transformer_.config().n_ctx_train - n_tokens + 1);
    const int32_t k = seq.speculation_length.Next(
        std::min(spec.num_speculative_tokens, left - 1), token_cost);
    if (k <= 0) continue;
    requests.push_back({.sequence = seq.arrival, .tokens = seq.tokens, .max_tokens = k});
    asking.push_back(i);
  }
  if (requests.empty()) return entries;
  spec.proposer->Propose(requests);
  for (size_t r = 0; r < requests.size(); ++r) {
    DecodeSequence& seq = running_[asking[r]];
    std::vector<engine::TokenId>& proposal = requests[r].proposal;
    const int32_t n_tokens = static_cast<int32_t>(seq.tokens.size());
    if (!cache_.Reserve(seq.table, n_tokens + static_cast<int32_t>(proposal.size())).ok()) {
      // No free block: propose only what the blocks held already have room for.
      const int32_t room = seq.table.n_blocks() * cache_.block_size();
      proposal.resize(std::max(0, room - n_tokens));
    }
    std::vector<engine::TokenId>& fed = entries[asking[r]].fed;
    fed.insert(fed.end(), proposal.begin(), proposal.end());
  }
  return entries;
}

double DecodeBatch::TokenCost() const {
  const SpeculationOptions& spec = options_.speculation;
  return spec.token_cost >= 0 ? spec.token_cost : step_cost_.RowCost() + spec.proposer_cost;
}

engine::DrawnToken DecodeBatch::Draw(engine::Sampler& sampler, DecodeSequence& seq,
                                     std::span<float> logits) {
  if (!seq.output_matcher) {
    return engine::DrawToken(sampler, seq.params, logits, seq.tokens,
                             static_cast<int64_t>(seq.tokens.size()));
  }
  const auto start = std::chrono::steady_clock::now();
  if (!seq.output_matcher->MaskLogits(logits)) return {.token = kDeadEnd};
  const auto masked = std::chrono::steady_clock::now();
  engine::DrawnToken drawn = engine::DrawToken(sampler, seq.params, logits, seq.tokens,
                                               static_cast<int64_t>(seq.tokens.size()));
  const auto drew = std::chrono::steady_clock::now();
  // The mask allowed it, so the matcher takes it.
  CHECK(seq.output_matcher->Accept(drawn.token).ok());
  seq.counts.mask_seconds += std::chrono::duration<double>(
                                 (masked - start) + (std::chrono::steady_clock::now() - drew))
                                 .count();
  return drawn;
}

std::vector<engine::DrawnToken> DecodeBatch::DrawFirstTokens(
    const std::vector<StepEntry>& entries) {
  const int32_t n_vocab = transformer_.config().n_vocab;
  std::vector<size_t> rows(entries.size());  // each entry's first logits row
  size_t row = 0;
  for (size_t i = 0; i < entries.size(); ++i) {
    rows[i] = row;
    row += entries[i].fed.size();
  }
  std::vector<engine::DrawnToken> drawn(entries.size());
  cache_.backend().ParallelForOnHost(
      static_cast<int64_t>(entries.size()), [&](int64_t begin, int64_t end, int thread) {
        for (int64_t i = begin; i < end; ++i) {
          if (entries[i].fed.size() != 1) continue;
          drawn[i] = Draw(samplers_[thread], running_[i],
                          {logits_.data() + rows[i] * n_vocab, static_cast<size_t>(n_vocab)});
        }
      });
  return drawn;
}

absl::StatusOr<engine::FinishReason> DecodeBatch::AcceptTokens(DecodeSequence& seq,
                                                               const StepEntry& entry,
                                                               size_t first_row,
                                                               engine::DrawnToken drawn) {
  const int32_t n_vocab = transformer_.config().n_vocab;
  const int32_t proposed = static_cast<int32_t>(entry.fed.size()) - 1;
  seq.counts.proposed += proposed;
  int32_t accepted = 0;
  engine::FinishReason finish = engine::FinishReason::kNone;
  absl::Status dead_end;
  for (size_t j = 0; j < entry.fed.size(); ++j) {
    const engine::DrawnToken draw =
        j == 0 && entry.fed.size() == 1
            ? std::move(drawn)
            : Draw(samplers_[0], seq,
                   {logits_.data() + (first_row + j) * n_vocab, static_cast<size_t>(n_vocab)});
    const engine::TokenId token = draw.token;
    if (token == kDeadEnd) {
      dead_end = absl::FailedPreconditionError(absl::StrCat(
          "the output constraint allows no token after ", seq.tokens.size() - seq.n_prompt,
          " generated tokens (a dead end of its grammar)"));
      break;
    }
    seq.tokens.push_back(token);
    const int32_t n_generated = static_cast<int32_t>(seq.tokens.size()) - seq.n_prompt;
    finish = engine::FinishReasonAfterToken(tokenizer_, seq.params, token, n_generated,
                                            static_cast<int32_t>(seq.tokens.size()),
                                            transformer_.config().n_ctx_train);
    // The output is complete and ended: nothing may follow, ignore_eos or not.
    if (seq.output_matcher && seq.output_matcher->IsTerminated()) {
      finish = engine::FinishReason::kStop;
    }
    if (seq.sink) {
      seq.sink->OnToken(token, draw.logprobs ? &*draw.logprobs : nullptr, n_generated,
                        seq.counts);
    }
    if (finish != engine::FinishReason::kNone) break;
    if (j + 1 == entry.fed.size() || token != entry.fed[j + 1]) break;
    // The proposal fed after this position was drawn: kept, and its logits row is valid.
    ++accepted;
    ++seq.counts.accepted;
  }
  if (proposed > 0) {
    seq.speculation_length.Record(proposed, accepted);
    SpeculationMetrics& m = Speculation();
    m.drafts.Increment();
    m.draft_tokens.Increment(proposed);
    m.accepted_tokens.Increment(accepted);
    m.acceptance_rate.Set(m.accepted_tokens.value() / m.draft_tokens.value());
  }
  // KV is valid for every token but the newest: the rejected proposals' is forgotten.
  const int32_t kept = static_cast<int32_t>(seq.tokens.size()) - 1;
  // Never below the step's first position, where the windows let go: nothing is lost.
  CHECK_EQ(cache_.Truncate(seq.table, kept, entry.blocks_before), kept);
  if (!dead_end.ok()) return dead_end;
  return finish;
}

bool DecodeBatch::Step() {
  TakeArrivalsAndCancellations();
  ResumePreempted();
  const size_t n = MakeRoom(std::min<size_t>(running_.size(), options_.max_batch));
  n_running_.store(static_cast<int32_t>(running_.size()));
  n_preempted_.store(static_cast<int32_t>(preempted_.size()));
  if (n == 0) return false;

  const std::vector<StepEntry> entries = PlanStep(n);
  std::vector<engine::SequenceInput> inputs(n);
  bool verifying = false;
  int64_t rows = 0;
  for (size_t i = 0; i < n; ++i) {
    verifying = verifying || entries[i].fed.size() > 1;
    rows += static_cast<int64_t>(entries[i].fed.size());
    inputs[i] = {.tokens = entries[i].fed, .kv = &running_[i].table, .all_logits = true};
  }
  // Both give the same logits for a one-token entry (batch invariance); Decode is the cheaper.
  const auto start = std::chrono::steady_clock::now();
  const absl::Status status =
      verifying ? transformer_.Prefill(inputs, logits_) : transformer_.Decode(inputs, logits_);
  const std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
  if (status.ok()) {
    step_cost_.Observe(rows, took.count());
    one_row_step_seconds_ = step_cost_.OneRowSeconds();
    row_cost_ = step_cost_.RowCost();
  }
  ++n_steps_;
  BatchSizeHistogram().Observe(static_cast<double>(n));
  std::vector<bool> done(running_.size(), false);
  std::vector<engine::DrawnToken> drawn =
      status.ok() ? DrawFirstTokens(entries) : std::vector<engine::DrawnToken>(n);
  size_t row = 0;
  for (size_t i = 0; i < n; ++i) {
    DecodeSequence& seq = running_[i];
    if (!status.ok()) {
      Finish(seq, engine::FinishReason::kNone, status);
      done[i] = true;
      continue;
    }
    const absl::StatusOr<engine::FinishReason> finish =
        AcceptTokens(seq, entries[i], row, std::move(drawn[i]));
    row += entries[i].fed.size();
    if (!finish.ok()) {
      Finish(seq, engine::FinishReason::kNone, finish.status());
      done[i] = true;
    } else if (*finish != engine::FinishReason::kNone) {
      Finish(seq, *finish, absl::OkStatus());
      done[i] = true;
    }
  }
  // Rotate: the sequences that did not fit this step go first next time.
  std::vector<DecodeSequence> next;
  next.reserve(running_.size());
  for (size_t i = n; i < running_.size(); ++i) next.push_back(std::move(running_[i]));
  for (size_t i = 0; i < n; ++i) {
    if (!done[i]) next.push_back(std::move(running_[i]));
  }
  running_.swap(next);
  n_running_.store(static_cast<int32_t>(running_.size()));
  return true;
}

}  // namespace baton::decode_worker
