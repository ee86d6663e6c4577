// How many tokens a sequence has proposed at a decode step: the length that maximizes expected
// tokens per unit of step time, learned from the sequence's own acceptance.
//
// The model (Leviathan et al., "Fast Inference from Transformers via Speculative Decoding"): each
// proposed token is accepted with probability a once the ones before it were, so k proposals
// yield E(k) = (1 - a^(k+1)) / (1 - a) tokens per step, and cost 1 + k * c step-times, c being
// one more verification row plus one proposed token relative to a plain decode step. Next()
// picks the k in [0, max_k] with the largest E(k) / (1 + k c). When a is so low that k = 0 wins,
// the sequence decodes plainly for kRetrySteps steps and then tries again from the prior.
//
// a is estimated from recent verifications (exponential decay 0.8): k proposals of which m were
// accepted count m successes in m + (m < k ? 1 : 0) trials (the first rejection ends the trial).
//
// Thread-compatible value type (one per sequence, on the engine thread).
#ifndef BATON_DECODE_WORKER_SPECULATION_LENGTH_H_
#define BATON_DECODE_WORKER_SPECULATION_LENGTH_H_

#include <cstdint>

namespace baton::decode_worker {

class SpeculationLength {
 public:
  static constexpr int32_t kRetrySteps = 16;

  // Tokens to propose at this step, in [0, max_k]; `token_cost` is c above (> 0).
  int32_t Next(int32_t max_k, double token_cost);
  // A verification of `proposed` (> 0) tokens accepted the first `accepted` of them.
  void Record(int32_t proposed, int32_t accepted);

  double acceptance() const { return successes_ / trials_; }

 private:
  // Prior: a = 0.75 over 4 trials, so a new sequence speculates and learns within a few steps.
  double successes_ = 3;
  double trials_ = 4;
  int32_t paused_steps_ = 0;
};

// E(k) / (1 + k c): expected tokens per step-time with k proposals at acceptance a.
double SpeculationGain(double acceptance, int32_t k, double token_cost);

// c for a sequence in a step of `n_sequences` (>= 1): a proposed token lengthens a step that
// every sequence of the batch waits for, which costs 1 + (n - 1) c one-row steps, so its cost
// relative to one sequence's share of that step is n c / (1 + (n - 1) c). With it, "k > 0
// proposals pay" (E(k) > 1 + k c') is exactly "the step yields more tokens per second"; with c
// alone a batch of 4 at c = 0.24 and 60% acceptance would speculate and lose 7%.
double BatchTokenCost(double token_cost, int64_t n_sequences);

}  // namespace baton::decode_worker

#endif  // BATON_DECODE_WORKER_SPECULATION_LENGTH_H_
