// Chooses the next token from a row of logits, and reports log-probabilities for the API.
//
// The chain follows llama.cpp's default order:
//   logit bias -> penalties (repetition, frequency, presence over the last penalty_last_n tokens)
//   -> greedy argmax when temperature == 0 or top_k == 1 (lowest id wins ties)
//   -> top-k -> top-p -> min-p   (top-p and min-p judge probabilities at temperature 1)
//   -> temperature -> softmax -> one draw.
//
// Determinism: a draw is a pure function of (params, logits, previous_tokens, position). Its one
// random number comes from a counter-based generator keyed by (params.seed, position), so a seeded
// request yields the same tokens whatever else is batched beside it, in whatever order sequences
// are sampled, on whichever worker samples them (the prefill worker draws the first token, the
// decode worker the rest).
//
// Cost: O(n_vocab) per draw plus the ordering of only what the filters keep (top-k uses
// nth_element; top-p without top-k orders the best candidates in growing batches, not the whole
// vocabulary). A Sampler reuses its buffers, so steady-state sampling does not allocate.
//
// Logits: -inf masks a token (it is never drawn). A NaN logit is treated as -inf and +inf as the
// largest finite float, so a broken model yields some token rather than undefined behavior; when
// every logit is masked the result is token 0.
//
// Thread-safety: Sampler is thread-compatible (it owns scratch buffers; use one per thread). The
// free functions are safe from any thread.
#ifndef BATON_ENGINE_SAMPLER_H_
#define BATON_ENGINE_SAMPLER_H_

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "engine/sampling_params.h"

namespace baton::engine {

// A uniform double in [0, 1) determined by (seed, position) alone: SplitMix64-style mixing of the
// two, 53 random bits. Distinct positions give independent-looking values.
double CounterUniform(uint64_t seed, int64_t position);

// Applies the repetition, frequency and presence penalties of `params` in place. A token that
// occurs `count` > 0 times among the last penalty_last_n entries of `previous_tokens` (all of them
// when -1, none when 0) gets, in this order:
//   logit = logit > 0 ? logit / repetition_penalty : logit * repetition_penalty
//   logit -= count * frequency_penalty + presence_penalty
// Ids outside [0, logits.size()) in previous_tokens are ignored.
void ApplyPenalties(const SamplingParams& params, std::span<const int32_t> previous_tokens,
                    std::span<float> logits);

class Sampler {
 public:
  Sampler() = default;

  // Returns the token for sequence index `position` (0 = the first prompt token; the first
  // generated token's position is the prompt length). `logits` has n_vocab > 0 entries;
  // `previous_tokens` is the prompt plus the tokens generated so far (for the penalties).
  // Precondition: ValidateSamplingParams(params, logits.size()) is OK.
  int32_t Sample(const SamplingParams& params, std::span<const float> logits,
                 std::span<const int32_t> previous_tokens, int64_t position);

 private:
  struct Candidate {
    int32_t id;
    float logit;
  };
  // Fills candidates_ with the unmasked logits and applies top-k; returns how many of them lead
  // candidates_ in order (the k best after top-k; 0 when top-k does not apply: id order).
  size_t SelectCandidates(std::span<const float> logits, int32_t top_k);
  // Top-k by a bound: false (candidates_ unspecified) where the bound does not serve.
  bool SelectTopKByBlocks(std::span<const float> logits, int32_t top_k);
  // Keeps the k (<= size) best candidates, ordered by Before.
  void KeepBest(size_t k);
  // Top-p over candidates_ whose first n_sorted lead in order: keeps the shortest most-likely
  // prefix whose probability (at temperature 1) reaches top_p, ordering the best a batch at a
  // time (64, then 4x more each round); returns how many lead in order.
  size_t KeepNucleus(float top_p, size_t n_sorted);
  // Top-p when no top-k applies: candidates_ = the nucleus of every unmasked logit, in order,
  // found without ordering the vocabulary; returns its size. The same nucleus as KeepNucleus.
  size_t SelectNucleusOfAll(std::span<const float> logits, float top_p);
  // The draw when no filter applies (the OpenAI API's default): over the logits in place, in id
  // order, with no candidate list: the weights and order the candidates would have.
  int32_t DrawFromAll(const SamplingParams& params, std::span<const float> logits,
                      int64_t position);

  std::vector<float> logits_;          // [n_vocab] the input biased, penalized (either on)
  std::vector<float> block_max_;       // [n_vocab / 256] the largest logit of each block
  std::vector<float> block_order_;     // block_max_, partly ordered to find the k-th largest
  std::vector<Candidate> candidates_;  // survivors of the filters
  std::vector<float> weights_;         // [candidates or n_vocab] exp((logit - max) / T)
  std::vector<double> block_sums_;     // the weights' sums, a block of 256 at a time
  std::vector<int32_t> window_;        // sorted copy of the penalty window
};

// One-shot convenience: the same result as Sampler().Sample(...), allocating its scratch.
int32_t Sample(const SamplingParams& params, std::span<const float> logits,
               std::span<const int32_t> previous_tokens, int64_t position);

struct TokenLogprob {
  int32_t id;
  float logprob;  // natural log of the token's probability
};

// The `k` most likely tokens under log-softmax of the raw `logits` (no penalties, no temperature),
// most likely first, lower id first among equals. k is clamped to [0, logits.size()].
std::vector<TokenLogprob> TopLogprobs(std::span<const float> logits, int32_t k);

// What a request's `logprobs` report for one generated token (OpenAI's logprobs, computed as vLLM's
// default "raw" ones: log-softmax of the model's logits at the token's position, before penalties,
// temperature and filters).
struct TokenLogprobs {
  float logprob = 0;              // the generated token's (-inf when the logits mask it)
  std::vector<TokenLogprob> top;  // the k most likely tokens', as TopLogprobs
};

// `token`'s log-probability and the `k` most likely tokens' under log-softmax of the raw
// `logits`; one pass for the normalizer serves both. `token` in [0, logits.size()).
TokenLogprobs LogprobsOf(std::span<const float> logits, int32_t token, int32_t k);

// A generated token and, when its sampling asks (params.logprobs >= 0), its log-probabilities.
struct DrawnToken {
  int32_t token = -1;
  std::optional<TokenLogprobs> logprobs;
};

// sampler.Sample(...), then LogprobsOf the token drawn when params.logprobs >= 0: how a worker
// turns a logits row into the token it reports.
DrawnToken DrawToken(Sampler& sampler, const SamplingParams& params, std::span<const float> logits,
                     std::span<const int32_t> previous_tokens, int64_t position);

}  // namespace baton::engine

#endif  // BATON_ENGINE_SAMPLER_H_
