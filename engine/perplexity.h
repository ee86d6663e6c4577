// Perplexity of a model on a token sequence: the text is cut into windows of `window` tokens, each
// evaluated from an empty context; every token but a window's first is scored.
#ifndef BATON_ENGINE_PERPLEXITY_H_
#define BATON_ENGINE_PERPLEXITY_H_

#include <vector>

#include "absl/status/statusor.h"
#include "engine/generator.h"

namespace baton::engine {

struct PerplexityResult {
  double perplexity = 0;
  double mean_nll = 0;
  int64_t n_scored = 0;
  int64_t n_windows = 0;
  std::vector<double> nll;        // [n_scored] per scored token, in order
  std::vector<TokenId> argmax;    // [n_scored] the model's top prediction for each scored token
};

absl::StatusOr<PerplexityResult> ComputePerplexity(Generator& generator,
                                                   const std::vector<TokenId>& tokens,
                                                   int32_t window);

}  // namespace baton::engine

#endif  // BATON_ENGINE_PERPLEXITY_H_
