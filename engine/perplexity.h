// Perplexity of a model on a token sequence, two ways:
//  - ComputePerplexity, baton's own: the text is cut into windows of `window` tokens, each
//    evaluated from an empty context; every token but a window's first is scored.
//  - ScoreChunks, llama.cpp's (llama-perplexity, and the scheme of its KL-divergence files,
//    log_prob_file.h): chunk c is tokens[c*n_ctx, (c+1)*n_ctx), evaluated from an empty context
//    with its first token replaced by BOS where the vocabulary adds one; only the second half of
//    each chunk is scored (positions n_ctx/2 .. n_ctx-2, each against the token after it), so
//    every scored token has at least n_ctx/2 tokens of context.
#ifndef BATON_ENGINE_PERPLEXITY_H_
#define BATON_ENGINE_PERPLEXITY_H_

#include <functional>
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

// One chunk of ScoreChunks: the logits of its scored positions and the tokens they predict.
struct ScoredChunk {
  int32_t index = 0;
  int32_t n_scored = 0;               // ScoredPositions(n_ctx)
  int32_t n_vocab = 0;
  const float* logits = nullptr;      // [n_scored, n_vocab]
  const TokenId* targets = nullptr;   // [n_scored]
};
using ScoredChunkFn = std::function<absl::Status(const ScoredChunk&)>;

// The token ScoreChunks puts first in each chunk: BOS where the vocabulary adds one (as
// llama.cpp), else kNoToken (the chunk's own first token stays).
TokenId ChunkStartToken(const Vocab& vocab);

// Evaluates the tokens.size() / n_ctx whole chunks of `tokens` in order and hands each to `fn`
// (which may stop the run with an error). `bos` replaces each chunk's first token; kNoToken keeps
// it. Fails if fewer than n_ctx tokens are given or a logit is not finite.
absl::Status ScoreChunks(Generator& generator, const std::vector<TokenId>& tokens, int32_t n_ctx,
                         TokenId bos, const ScoredChunkFn& fn);

// The first `chunks` chunks of n_ctx tokens of `tokens` (all of them for chunks = 0).
std::vector<TokenId> FirstChunks(std::vector<TokenId> tokens, int32_t n_ctx, int64_t chunks);

// The running mean of values and the standard error of that mean (0 for fewer than 2 values).
class MeanAccumulator {
 public:
  void Add(double value) {
    sum_ += value;
    sum2_ += value * value;
    ++count_;
  }
  int64_t count() const { return count_; }
  double mean() const;
  double standard_error() const;

 private:
  double sum_ = 0;
  double sum2_ = 0;
  int64_t count_ = 0;
};

// llama.cpp's summary of negative log-likelihoods: PPL = exp(mean) +/- PPL * its standard error.
struct PerplexityEstimate {
  double perplexity = 0;
  double uncertainty = 0;
  int64_t n_scored = 0;
};
PerplexityEstimate EstimatePerplexity(const MeanAccumulator& nll);

}  // namespace baton::engine

#endif  // BATON_ENGINE_PERPLEXITY_H_
