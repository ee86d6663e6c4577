#include "decode_worker/decode_batch.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace baton::decode_worker {

DecodeBatch::DecodeBatch(const engine::Tokenizer* tokenizer, engine::Transformer* transformer,
                         engine::KvCache* cache, DecodeBatchOptions options)
    : tokenizer_(*tokenizer), transformer_(*transformer), cache_(*cache), options_(options) {}

DecodeBatch::~DecodeBatch() {
  for (DecodeSequence& seq : running_) cache_.Free(seq.table);
  absl::MutexLock lock(&mu_);
  for (DecodeSequence& seq : admitted_) cache_.Free(seq.table);
}

void DecodeBatch::Admit(DecodeSequence sequence) {
  absl::MutexLock lock(&mu_);
  admitted_.push_back(std::move(sequence));
}

bool DecodeBatch::Cancel(const std::string& id) {
  absl::MutexLock lock(&mu_);
  cancelled_.push_back(id);
  return true;
}

int32_t DecodeBatch::n_waiting() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int32_t>(admitted_.size());
}

void DecodeBatch::Finish(DecodeSequence& seq, StopReason reason, const absl::Status& error) {
  cache_.Free(seq.table);
  if (seq.sink) {
    const int32_t n_generated = static_cast<int32_t>(seq.tokens.size()) - seq.n_prompt;
    seq.sink->OnToken(-1, n_generated, reason, error);
  }
}

bool DecodeBatch::Step() {
  std::vector<std::string> cancelled;
  {
    absl::MutexLock lock(&mu_);
    for (DecodeSequence& seq : admitted_) running_.push_back(std::move(seq));
    admitted_.clear();
    cancelled.swap(cancelled_);
  }
  if (!cancelled.empty()) {
    for (auto it = running_.begin(); it != running_.end();) {
      if (std::find(cancelled.begin(), cancelled.end(), it->id) != cancelled.end()) {
        Finish(*it, StopReason::kCancelled, absl::CancelledError("cancelled"));
        it = running_.erase(it);
      } else {
        ++it;
      }
    }
  }
  // A sequence admitted with nothing left to generate (max_tokens reached by the first token).
  for (auto it = running_.begin(); it != running_.end();) {
    const int32_t n_generated = static_cast<int32_t>(it->tokens.size()) - it->n_prompt;
    if (n_generated >= it->params.max_tokens) {
      Finish(*it, StopReason::kLength, absl::OkStatus());
      it = running_.erase(it);
    } else {
      ++it;
    }
  }
  n_running_.store(static_cast<int32_t>(running_.size()));
  if (running_.empty()) return false;

  const size_t n = std::min<size_t>(running_.size(), options_.max_batch);
  std::vector<engine::SequenceInput> inputs(n);
  for (size_t i = 0; i < n; ++i) {
    inputs[i] = {.tokens = {&running_[i].tokens.back(), 1}, .kv = &running_[i].table};
  }
  absl::Status status = transformer_.Decode(inputs, logits_);
  ++n_steps_;
  const int32_t n_vocab = transformer_.config().n_vocab;
  std::vector<bool> done(running_.size(), false);
  for (size_t i = 0; i < n; ++i) {
    DecodeSequence& seq = running_[i];
    if (!status.ok()) {
      Finish(seq, StopReason::kError, status);
      done[i] = true;
      continue;
    }
    const engine::TokenId token =
        sampler_.Sample(seq.params, {logits_.data() + i * n_vocab, static_cast<size_t>(n_vocab)},
                        seq.tokens, static_cast<int64_t>(seq.tokens.size()));
    seq.tokens.push_back(token);
    const int32_t n_generated = static_cast<int32_t>(seq.tokens.size()) - seq.n_prompt;
    StopReason stop = StopReason::kNone;
    if ((!seq.params.ignore_eos && tokenizer_.IsEndOfGeneration(token)) ||
        std::find(seq.params.stop_token_ids.begin(), seq.params.stop_token_ids.end(), token) !=
            seq.params.stop_token_ids.end()) {
      stop = StopReason::kStop;
    } else if (n_generated >= seq.params.max_tokens ||
               static_cast<int64_t>(seq.tokens.size()) >=
                   int64_t{static_cast<int32_t>(seq.table.blocks.size())} * cache_.block_size() + 1 ||
               static_cast<int32_t>(seq.tokens.size()) >= transformer_.config().n_ctx_train) {
      stop = StopReason::kLength;
    }
    if (seq.sink) seq.sink->OnToken(token, n_generated, StopReason::kNone, absl::OkStatus());
    if (stop != StopReason::kNone) {
      Finish(seq, stop, absl::OkStatus());
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
