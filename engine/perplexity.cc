#include "engine/perplexity.h"

#include <algorithm>
#include <cmath>

#include "absl/status/status.h"

namespace baton::engine {

absl::StatusOr<PerplexityResult> ComputePerplexity(Generator& generator,
                                                   const std::vector<TokenId>& tokens,
                                                   int32_t window) {
  if (tokens.size() < 2) {
    return absl::InvalidArgumentError("perplexity needs a text of at least 2 tokens");
  }
  PerplexityResult result;
  double total = 0;
  for (size_t begin = 0; begin + 1 < tokens.size(); begin += window) {
    const size_t end = std::min(tokens.size(), begin + window);
    std::vector<TokenId> chunk(tokens.begin() + begin, tokens.begin() + end);
    absl::StatusOr<std::vector<float>> logits = generator.AllLogits(chunk);
    if (!logits.ok()) return logits.status();
    const size_t n_vocab = logits->size() / chunk.size();
    for (size_t i = 0; i + 1 < chunk.size(); ++i) {
      const float* row = logits->data() + i * n_vocab;
      const float* best = std::max_element(row, row + n_vocab);
      double sum = 0;
      for (size_t v = 0; v < n_vocab; ++v) sum += std::exp(static_cast<double>(row[v]) - *best);
      const double nll = std::log(sum) + *best - row[chunk[i + 1]];
      result.nll.push_back(nll);
      result.argmax.push_back(static_cast<TokenId>(best - row));
      total += nll;
    }
    ++result.n_windows;
  }
  result.n_scored = static_cast<int64_t>(result.nll.size());
  result.mean_nll = total / static_cast<double>(result.n_scored);
  result.perplexity = std::exp(result.mean_nll);
  return result;
}

}  // namespace baton::engine
