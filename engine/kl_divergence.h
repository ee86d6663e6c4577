// How far a model's next-token distributions are from a base model's, measured as llama.cpp's
// `llama-perplexity --kl-divergence` measures it, against a base file (log_prob_file.h) written by
// baton or by llama.cpp: per scored position, KL(base || model) over the tokens whose stored base
// log-probability is above -16, whether the two top tokens agree, and the difference in the
// probability given to the actual next token.
//
// The base is usually the same weights run in exact arithmetic (baton's reference kernels, or
// llama.cpp on an F32 copy), so the figures price the fast kernels' arithmetic; or a model of
// higher precision, so they price quantization.
//
// Thread-safety: an accumulator is used by one thread at a time; the functions are reentrant.
#ifndef BATON_ENGINE_KL_DIVERGENCE_H_
#define BATON_ENGINE_KL_DIVERGENCE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/generator.h"
#include "engine/log_prob_file.h"
#include "engine/perplexity.h"

namespace baton::engine {

// llama.cpp's summary. "±" figures are standard errors of the mean (MeanAccumulator);
// percentiles interpolate linearly between sorted values.
struct KlDivergenceSummary {
  int64_t count = 0;              // scored positions
  PerplexityEstimate ppl;         // the model's
  PerplexityEstimate ppl_base;    // the base file's (from the stored, 16-nat-floored log-probs)
  double ln_ppl_ratio = 0;        // mean ln(PPL / PPL_base) and its uncertainty
  double ln_ppl_ratio_uncertainty = 0;
  double ln_ppl_correlation = 0;  // of the per-position NLLs, -1..1
  double kld_mean = 0;
  double kld_uncertainty = 0;
  double kld_max = 0;
  double kld_p999 = 0;
  double kld_p99 = 0;
  double kld_median = 0;
  double kld_min = 0;
  double rms_delta_p = 0;         // RMS of p(next) - p_base(next), as a fraction
  double rms_delta_p_uncertainty = 0;
  double same_top = 0;            // fraction of positions where the argmaxes agree
  double same_top_uncertainty = 0;
};

class KlDivergenceAccumulator {
 public:
  // Scores one position: the model's logits [n_vocab], the base's stored row, the next token.
  void Add(const float* logits, const uint16_t* base_row, int32_t n_vocab, TokenId target);

  KlDivergenceSummary Summarize() const;

 private:
  MeanAccumulator nll_, nll_base_, kld_;
  MeanAccumulator delta_p2_;     // (p(next) - p_base(next))^2
  double nll_nll_base_ = 0;      // sum of nll * nll_base, for their covariance
  int64_t same_top_ = 0;
  std::vector<float> klds_;      // per position, in order
};

// Runs `generator` over `tokens` by ScoreChunks (n_ctx tokens a chunk, `bos` as there) and writes
// llama.cpp's base file to `path`. Returns the perplexity of the scored positions.
absl::StatusOr<PerplexityEstimate> WriteKlDivergenceBase(Generator& generator,
                                                         const std::vector<TokenId>& tokens,
                                                         int32_t n_ctx, TokenId bos,
                                                         const std::string& path);

// Runs `generator` over the base file's tokens (its n_ctx, `bos` as in ScoreChunks; the first
// `max_chunks` chunks, all for 0) and scores every position against the stored ones. The
// generator's vocabulary must be the file's.
absl::StatusOr<KlDivergenceSummary> ScoreKlDivergence(Generator& generator,
                                                      LogProbFileReader& base, TokenId bos,
                                                      int64_t max_chunks = 0);

}  // namespace baton::engine

#endif  // BATON_ENGINE_KL_DIVERGENCE_H_
