#include "engine/draft_proposer.h"

#include <algorithm>
#include <unordered_map>

#include "absl/strings/str_cat.h"
#include "base/log.h"
#include "engine/kv_cache.h"
#include "engine/sampler.h"
#include "engine/transformer.h"

namespace baton::engine {
namespace {

size_t CommonPrefix(std::span<const TokenId> a, std::span<const TokenId> b) {
  const size_t n = std::min(a.size(), b.size());
  return static_cast<size_t>(std::mismatch(a.begin(), a.begin() + n, b.begin()).first - a.begin());
}

// What the draft holds for one sequence: the KV of `computed`, in `table`.
struct DraftSequence {
  BlockTable table;
  std::vector<TokenId> computed;
};

class DraftProposer final : public Proposer {
 public:
  DraftProposer(const Model* draft, kernels::Backend* backend, std::unique_ptr<KvCache> cache,
                const DraftProposerOptions& options)
      : cache_(std::move(cache)),
        transformer_(&draft->config(), &draft->weights(), backend, cache_.get()),
        n_vocab_(draft->config().n_vocab),
        options_(options) {}

  ~DraftProposer() override {
    for (auto& [key, seq] : sequences_) cache_->Free(seq.table);
  }

  void Propose(std::span<ProposalRequest> requests) override {
    std::vector<Active> active = CatchUp(requests);
    if (active.empty()) return;
    // Then one greedy guess per round for every sequence that wants more.
    for (;;) {
      std::vector<SequenceInput> inputs;
      std::vector<Active*> guessing;
      for (Active& a : active) {
        if (a.request->proposal.empty() ||
            static_cast<int32_t>(a.request->proposal.size()) >= a.request->max_tokens) {
          continue;
        }
        inputs.push_back({.tokens = {&a.request->proposal.back(), 1}, .kv = &a.seq->table});
        guessing.push_back(&a);
      }
      if (inputs.empty()) return;
      if (!Forward(inputs, guessing, /*decode=*/true)) return;
    }
  }

  void Forget(uint64_t sequence) override {
    auto it = sequences_.find(sequence);
    if (it == sequences_.end()) return;
    cache_->Free(it->second.table);
    sequences_.erase(it);
  }

 private:
  struct Active {
    ProposalRequest* request;
    DraftSequence* seq;
    bool proposes;  // caught up with its tokens: guesses this call
  };

  // Brings each sequence's draft KV in line with its tokens (one forward for all of them) and
  // makes the first guess of those that caught up. Returns the sequences that took part.
  std::vector<Active> CatchUp(std::span<ProposalRequest> requests) {
    std::vector<Active> active;
    std::vector<SequenceInput> inputs;
    for (ProposalRequest& request : requests) {
      request.proposal.clear();
      if (request.tokens.empty() || request.max_tokens <= 0) continue;
      DraftSequence& seq = sequences_[request.sequence];
      // Keep the longest agreeing prefix; the last token is always fed again for its logits.
      const size_t keep = cache_->Truncate(
          seq.table,
          static_cast<int32_t>(
              std::min(CommonPrefix(seq.computed, request.tokens), request.tokens.size() - 1)),
          seq.table.n_blocks());
      seq.computed.resize(keep);
      const size_t missing = request.tokens.size() - keep;
      const bool proposes = missing <= static_cast<size_t>(options_.max_catch_up_tokens);
      const size_t feed = std::min<size_t>(missing, options_.max_catch_up_tokens);
      // The fed tokens, then every guess but the last, are written.
      const int64_t room = keep + feed + (proposes ? request.max_tokens - 1 : 0);
      if (!cache_->Reserve(seq.table, static_cast<int32_t>(room)).ok()) {
        Forget(request.sequence);  // no room in the draft cache: no guess this time
        continue;
      }
      inputs.push_back({.tokens = request.tokens.subspan(keep, feed), .kv = &seq.table});
      active.push_back({&request, &seq, proposes});
    }
    if (inputs.empty()) return active;
    std::vector<Active*> all;
    for (Active& a : active) all.push_back(&a);
    if (!Forward(inputs, all, /*decode=*/false)) return {};
    return active;
  }

  // Runs the draft over `inputs` (one per sequence of `who`), records the fed tokens and appends
  // each proposing sequence's greedy guess. On failure every sequence involved is forgotten and
  // proposes nothing; false then.
  bool Forward(std::span<const SequenceInput> inputs, std::span<Active* const> who, bool decode) {
    const absl::Status status = decode ? transformer_.Decode(inputs, logits_)
                                       : transformer_.Prefill(inputs, logits_);
    if (!status.ok()) {
      BATON_LOG(WARNING) << "draft model forward failed, no proposals this step: "
                         << status.message();
      for (Active* a : who) {
        a->request->proposal.clear();
        Forget(a->request->sequence);
      }
      return false;
    }
    for (size_t i = 0; i < who.size(); ++i) {
      Active& a = *who[i];
      a.seq->computed.insert(a.seq->computed.end(), inputs[i].tokens.begin(),
                             inputs[i].tokens.end());
      if (!a.proposes) continue;
      a.request->proposal.push_back(sampler_.Sample(
          greedy_, {logits_.data() + i * n_vocab_, static_cast<size_t>(n_vocab_)}, {}, 0));
    }
    return true;
  }

  std::unique_ptr<KvCache> cache_;
  Transformer transformer_;
  const int32_t n_vocab_;
  const DraftProposerOptions options_;
  std::unordered_map<uint64_t, DraftSequence> sequences_;  // node-stable: Active points in
  std::vector<float> logits_;
  // Guesses are greedy, by the target sampler's own rule (lowest id wins ties, NaN never wins).
  Sampler sampler_;
  const SamplingParams greedy_ = {.temperature = 0, .penalty_last_n = 0};
};

}  // namespace

absl::StatusOr<std::unique_ptr<Proposer>> CreateDraftProposer(const Model* draft,
                                                              const Model& target,
                                                              kernels::Backend* backend,
                                                              const DraftProposerOptions& options) {
  const std::vector<std::string>& draft_tokens = draft->tokenizer().vocab().tokens;
  const std::vector<std::string>& target_tokens = target.tokenizer().vocab().tokens;
  if (draft->config().n_vocab != target.config().n_vocab || draft_tokens != target_tokens) {
    return absl::InvalidArgumentError(absl::StrCat(
        "draft model '", draft->id(), "' has a different vocabulary (", draft->config().n_vocab,
        " tokens) from the target '", target.id(), "' (", target.config().n_vocab,
        " tokens): speculative decoding needs the same one"));
  }
  const int32_t n_blocks =
      KvCache::BlocksForBytes(draft->config(), options.block_size, options.kv_cache_bytes);
  if (n_blocks < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("draft KV cache of ", options.kv_cache_bytes, " bytes holds no block"));
  }
  absl::StatusOr<std::unique_ptr<KvCache>> cache =
      KvCache::Create(draft->config(), {.block_size = options.block_size, .n_blocks = n_blocks},
                      *backend);
  if (!cache.ok()) return cache.status();
  return std::make_unique<DraftProposer>(draft, backend, std::move(*cache), options);
}

}  // namespace baton::engine
