#include "engine/ngram_proposer.h"

#include <algorithm>

namespace baton::engine {

std::vector<TokenId> PromptLookup(std::span<const TokenId> tokens, int32_t max_tokens,
                                  const NgramOptions& options) {
  const int64_t size = static_cast<int64_t>(tokens.size());
  if (max_tokens <= 0 || size < 2) return {};
  const int64_t last = size - 1;
  int64_t best_end = -1;
  int64_t best_n = std::max<int64_t>(options.min_n, 1) - 1;
  // Latest end first, so that a later match wins a tie.
  for (int64_t end = last - 1; end >= 0 && best_n < options.max_n; --end) {
    int64_t n = 0;
    while (n < options.max_n && n <= end && tokens[end - n] == tokens[last - n]) ++n;
    if (n > best_n) {
      best_n = n;
      best_end = end;
    }
  }
  if (best_end < 0) return {};
  const int64_t begin = best_end + 1;
  const int64_t stop = std::min(size, begin + max_tokens);
  return {tokens.begin() + begin, tokens.begin() + stop};
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
