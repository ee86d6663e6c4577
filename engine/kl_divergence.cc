#include "engine/kl_divergence.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_format.h"

namespace baton::engine {
namespace {

constexpr float kLowestScoredLogProb = -16.0f;  // base tokens below this add nothing to the KLD

// Linear interpolation between the sorted values around fraction * (n - 1).
double Percentile(const std::vector<float>& sorted, double fraction) {
  const double at = fraction * static_cast<double>(sorted.size() - 1);
  const auto below = static_cast<size_t>(at);
  const size_t above = std::min(below + 1, sorted.size() - 1);
  return sorted[below] + (at - static_cast<double>(below)) * (sorted[above] - sorted[below]);
}

}  // namespace

void KlDivergenceAccumulator::Add(const float* logits, const uint16_t* base_row, int32_t n_vocab,
                                  TokenId target) {
  const float* top = std::max_element(logits, logits + n_vocab);
  const float max_logit = *top;
  double sum_exp = 0;
  for (int32_t v = 0; v < n_vocab; ++v) sum_exp += std::exp(logits[v] - max_logit);
  const float log_norm = max_logit + static_cast<float>(std::log(sum_exp));  // log sum exp(logits)

  const float nll = log_norm - logits[target];
  const float nll_base = -StoredLogProb(base_row, target);
  double kld = 0;
  TokenId top_base = 0;
  float top_base_log_prob = StoredLogProb(base_row, 0);
  for (int32_t v = 0; v < n_vocab; ++v) {
    const float log_p_base = StoredLogProb(base_row, v);
    if (log_p_base > top_base_log_prob) {
      top_base_log_prob = log_p_base;
      top_base = v;
    }
    if (log_p_base > kLowestScoredLogProb) {
      kld += std::exp(log_p_base) * (log_p_base - (logits[v] - log_norm));
    }
  }
  const double delta_p = std::exp(-nll) - std::exp(-nll_base);

  nll_.Add(nll);
  nll_base_.Add(nll_base);
  nll_nll_base_ += double{nll} * nll_base;
  kld_.Add(kld);
  delta_p2_.Add(delta_p * delta_p);
  if (top - logits == top_base) ++same_top_;
  klds_.push_back(static_cast<float>(kld));
}

KlDivergenceSummary KlDivergenceAccumulator::Summarize() const {
  KlDivergenceSummary s;
  s.count = static_cast<int64_t>(klds_.size());
  if (s.count == 0) return s;
  const auto n = static_cast<double>(s.count);
  s.ppl = EstimatePerplexity(nll_);
  s.ppl_base = EstimatePerplexity(nll_base_);
  const double ln_ppl = nll_.mean(), ln_ppl_error = nll_.standard_error();
  const double ln_ppl_base = nll_base_.mean(), ln_ppl_base_error = nll_base_.standard_error();
  // Of the two means (llama.cpp's: none below 10 values).
  const double covariance = s.count < 10 ? 0 : (nll_nll_base_ / n - ln_ppl * ln_ppl_base) / (n - 1);
  const double error_product = ln_ppl_error * ln_ppl_base_error;
  s.ln_ppl_correlation = error_product > 0 ? covariance / error_product : 0;
  s.ln_ppl_ratio = ln_ppl - ln_ppl_base;
  s.ln_ppl_ratio_uncertainty = std::sqrt(std::max(
      0.0, ln_ppl_error * ln_ppl_error + ln_ppl_base_error * ln_ppl_base_error - 2 * covariance));

  s.kld_mean = kld_.mean();
  s.kld_uncertainty = kld_.standard_error();
  std::vector<float> sorted = klds_;
  std::sort(sorted.begin(), sorted.end());
  s.kld_min = sorted.front();
  s.kld_max = sorted.back();
  s.kld_median = Percentile(sorted, 0.5);
  s.kld_p99 = Percentile(sorted, 0.99);
  s.kld_p999 = Percentile(sorted, 0.999);

  s.rms_delta_p = std::sqrt(delta_p2_.mean());
  s.rms_delta_p_uncertainty =
      s.rms_delta_p > 0 ? 0.5 / s.rms_delta_p * delta_p2_.standard_error() : 0;
  s.same_top = static_cast<double>(same_top_) / n;
  s.same_top_uncertainty = s.count > 1 ? std::sqrt(s.same_top * (1 - s.same_top) / (n - 1)) : 0;
  return s;
}

absl::StatusOr<PerplexityEstimate> WriteKlDivergenceBase(Generator& generator,
                                                         const std::vector<TokenId>& tokens,
                                                         int32_t n_ctx, TokenId bos,
                                                         const std::string& path) {
  LogProbFileHeader header{.n_ctx = n_ctx,
                           .n_vocab = generator.model().config().n_vocab,
                           .n_chunk = static_cast<int32_t>(tokens.size() / n_ctx)};
  if (header.n_chunk < 1) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "the text has %d tokens; a base file needs at least one chunk of %d", tokens.size(),
        n_ctx));
  }
  header.tokens.assign(tokens.begin(), tokens.begin() + int64_t{header.n_chunk} * n_ctx);
  absl::StatusOr<std::unique_ptr<LogProbFileWriter>> writer =
      LogProbFileWriter::Create(path, header);
  if (!writer.ok()) return writer.status();
  const int64_t row_words = LogProbRowWords(header.n_vocab);
  std::vector<uint16_t> rows(ScoredPositions(n_ctx) * row_words);
  MeanAccumulator nll;
  absl::Status scored = ScoreChunks(generator, header.tokens, n_ctx, bos,
                                    [&](const ScoredChunk& chunk) {
    for (int32_t i = 0; i < chunk.n_scored; ++i) {
      nll.Add(EncodeLogProbRow(chunk.logits + int64_t{i} * chunk.n_vocab, chunk.n_vocab,
                               chunk.targets[i], rows.data() + i * row_words));
    }
    return (*writer)->WriteChunk(rows);
  });
  if (!scored.ok()) return scored;
  if (absl::Status closed = (*writer)->Close(); !closed.ok()) return closed;
  return EstimatePerplexity(nll);
}

absl::StatusOr<KlDivergenceSummary> ScoreKlDivergence(Generator& generator,
                                                      LogProbFileReader& base, TokenId bos,
                                                      int64_t max_chunks) {
  const LogProbFileHeader& header = base.header();
  const int32_t n_vocab = generator.model().config().n_vocab;
  if (header.n_vocab != n_vocab) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "the base file's vocabulary has %d tokens, the model's %d: not the same tokenizer",
        header.n_vocab, n_vocab));
  }
  const int64_t row_words = LogProbRowWords(n_vocab);
  std::vector<uint16_t> rows;
  KlDivergenceAccumulator kld;
  absl::Status scored = ScoreChunks(
      generator, FirstChunks(header.tokens, header.n_ctx, max_chunks), header.n_ctx, bos,
      [&](const ScoredChunk& chunk) {
    if (absl::Status read = base.ReadChunk(&rows); !read.ok()) return read;
    for (int32_t i = 0; i < chunk.n_scored; ++i) {
      kld.Add(chunk.logits + int64_t{i} * n_vocab, rows.data() + i * row_words, n_vocab,
              chunk.targets[i]);
    }
    return absl::OkStatus();
  });
  if (!scored.ok()) return scored;
  return kld.Summarize();
}

}  // namespace baton::engine
