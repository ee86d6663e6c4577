#include "decode_worker/speculation_length.h"

namespace baton::decode_worker {

double SpeculationGain(double acceptance, int32_t k, double token_cost) {
  // E(k) = 1 + a + a^2 + ... + a^k (written as a sum: a may be 1).
  double expected = 0;
  double term = 1;
  for (int32_t i = 0; i <= k; ++i) {
    expected += term;
    term *= acceptance;
  }
  return expected / (1.0 + k * token_cost);
}

double BatchTokenCost(double token_cost, int64_t n_sequences) {
  const double n = static_cast<double>(n_sequences);
  return n * token_cost / (1.0 + (n - 1.0) * token_cost);
}

int32_t SpeculationLength::Next(int32_t max_k, double token_cost) {
  if (paused_steps_ > 0) {
    if (--paused_steps_ == 0) *this = SpeculationLength();  // try again from the prior
    return 0;
  }
  int32_t best = 0;
  double best_gain = SpeculationGain(acceptance(), 0, token_cost);
  for (int32_t k = 1; k <= max_k; ++k) {
    const double gain = SpeculationGain(acceptance(), k, token_cost);
    if (gain > best_gain) {
      best = k;
      best_gain = gain;
    }
  }
  if (best == 0 && max_k > 0) paused_steps_ = kRetrySteps;
  return best;
}

void SpeculationLength::Record(int32_t proposed, int32_t accepted) {
  constexpr double kDecay = 0.8;
  successes_ = kDecay * successes_ + accepted;
  trials_ = kDecay * trials_ + accepted + (accepted < proposed ? 1 : 0);
}

}  // namespace baton::decode_worker
