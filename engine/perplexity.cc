#include "engine/perplexity.h"

#include <algorithm>
#include <cmath>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "engine/log_prob_file.h"

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

TokenId ChunkStartToken(const Vocab& vocab) { return vocab.add_bos ? vocab.bos_id : kNoToken; }

absl::Status ScoreChunks(Generator& generator, const std::vector<TokenId>& tokens, int32_t n_ctx,
                         TokenId bos, const ScoredChunkFn& fn) {
  const int64_t n_chunk = static_cast<int64_t>(tokens.size()) / n_ctx;
  if (n_ctx < 2 || n_chunk < 1) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "llama.cpp-style scoring needs at least one chunk of %d tokens; the text has %d", n_ctx,
        tokens.size()));
  }
  const int32_t first = n_ctx / 2;
  for (int64_t c = 0; c < n_chunk; ++c) {
    std::vector<TokenId> chunk(tokens.begin() + c * n_ctx, tokens.begin() + (c + 1) * n_ctx);
    if (bos != kNoToken) chunk[0] = bos;
    absl::StatusOr<std::vector<float>> logits = generator.AllLogits(chunk);
    if (!logits.ok()) return logits.status();
    const int64_t n_vocab = static_cast<int64_t>(logits->size()) / n_ctx;
    const float* scored = logits->data() + first * n_vocab;
    const int64_t n_values = int64_t{ScoredPositions(n_ctx)} * n_vocab;
    const float* bad = std::find_if(scored, scored + n_values,
                                    [](float v) { return !std::isfinite(v); });
    if (bad != scored + n_values) {
      return absl::InternalError(absl::StrFormat(
          "chunk %d: logit %d of position %d is %f", c + 1, (bad - scored) % n_vocab,
          first + (bad - scored) / n_vocab, *bad));
    }
    const ScoredChunk scored_chunk{.index = static_cast<int32_t>(c),
                                   .n_scored = ScoredPositions(n_ctx),
                                   .n_vocab = static_cast<int32_t>(n_vocab),
                                   .logits = scored,
                                   .targets = tokens.data() + c * n_ctx + first + 1};
    if (absl::Status status = fn(scored_chunk); !status.ok()) return status;
  }
  return absl::OkStatus();
}

std::vector<TokenId> FirstChunks(std::vector<TokenId> tokens, int32_t n_ctx, int64_t chunks) {
  if (chunks > 0 && static_cast<int64_t>(tokens.size()) > chunks * n_ctx) {
    tokens.resize(chunks * n_ctx);
  }
  return tokens;
}

double MeanAccumulator::mean() const {
  return count_ == 0 ? 0 : sum_ / static_cast<double>(count_);
}

double MeanAccumulator::standard_error() const {
  if (count_ < 2) return 0;
  const double variance = sum2_ / static_cast<double>(count_) - mean() * mean();
  return variance > 0 ? std::sqrt(variance / static_cast<double>(count_ - 1)) : 0;
}

PerplexityEstimate EstimatePerplexity(const MeanAccumulator& nll) {
  if (nll.count() == 0) return {};
  const double perplexity = std::exp(nll.mean());
  return {.perplexity = perplexity,
          .uncertainty = perplexity * nll.standard_error(),
          .n_scored = nll.count()};
}

}  // namespace baton::engine
