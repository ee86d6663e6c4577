#include "engine/ngram_proposer.h"

#include <algorithm>

namespace baton::engine {

std::vector<TokenId> PromptLookup(std::span<const TokenId> tokens, int32_t max_tokens,
                                  const NgramOptions& options) {
  const int64_t size = static_cast<int64_t>(tokens.size());
  if (max_tokens <= 0) return {};
  for (int64_t n = std::min<int64_t>(options.max_n, size - 1); n >= std::max(1, options.min_n);
       --n) {
    const std::span<const TokenId> suffix = tokens.subspan(size - n);
    // Latest occurrence first: recent context predicts best.
    for (int64_t p = size - n - 1; p >= 0; --p) {
      if (!std::equal(suffix.begin(), suffix.end(), tokens.begin() + p)) continue;
      const int64_t begin = p + n;
      const int64_t end = std::min(size, begin + max_tokens);
      return {tokens.begin() + begin, tokens.begin() + end};
    }
  }
  return {};
}

namespace {

class NgramProposer final : public Proposer {
 public:
  explicit NgramProposer(const NgramOptions& options) : options_(options) {}

  void Propose(std::span<ProposalRequest> requests) override {
    for (ProposalRequest& request : requests) {
      request.proposal = PromptLookup(request.tokens, request.max_tokens, options_);
    }
  }
  void Forget(uint64_t) override {}

 private:
  const NgramOptions options_;
};

}  // namespace

std::unique_ptr<Proposer> CreateNgramProposer(const NgramOptions& options) {
  return std::make_unique<NgramProposer>(options);
}

}  // namespace baton::engine
