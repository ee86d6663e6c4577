// The weights of the sampler's draw: exp((logit - max) / T) for each candidate, in (0, 1] (1 for
// the largest, so a tiny temperature underflows to 0 instead of overflowing), 0 for a masked one.
//
// DrawExp is Cephes' expf scheme in plain float arithmetic: x = n ln 2 + r with |r| <= ln 2 / 2
// (ln 2 in two parts), a degree-6 polynomial for exp(r), and 2^n put in the exponent bits.
// Relative error within 2e-7 of exp for x in [-87.3, 88]; 0 below (and for -inf); undefined for
// NaN or x > 88, which the weights never ask for (their arguments are <= 0). The same x always
// gives the same result, scalar or vectorized (no fused operations, the same order), so
// FillDrawWeights and DrawWeight agree bit for bit. glibc's expf was a call per element, most of
// a temperature draw over a 49,152-token vocabulary.
//
// Thread-safety: pure functions.
#ifndef BATON_ENGINE_DRAW_WEIGHTS_H_
#define BATON_ENGINE_DRAW_WEIGHTS_H_

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <span>

namespace baton::engine {

// NaN -> -inf (masked), +inf -> the largest float (certain, yet arithmetic stays finite).
inline float SanitizeLogit(float logit) {
  return std::min(std::isnan(logit) ? -std::numeric_limits<float>::infinity() : logit,
                  std::numeric_limits<float>::max());
}

inline float DrawExp(float x) {
  constexpr float kLowest = -87.33654f;  // below: exp underflows f32's normal range
  constexpr float kRound = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
  const float clamped = std::max(x, kLowest);
  const float n = (clamped * 1.44269504088896341f + kRound) - kRound;  // round(x / ln 2)
  float r = clamped - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const float exp_r = p * (r * r) + r + 1.0f;
  const float two_n = std::bit_cast<float>((static_cast<int32_t>(n) + 127) << 23);
  const float exp_x = exp_r * two_n;  // computed either way, so the select vectorizes
  return x < kLowest ? 0.0f : exp_x;
}

// The weight of a sanitized logit, given the largest one and 1 / T (+inf for a subnormal T).
inline float DrawWeight(float logit, float max, float inv_temperature) {
  // Both sides computed, then one chosen (for the largest the discarded one may be exp(0 * inf)).
  const float weight = DrawExp((logit - max) * inv_temperature);
  return logit == max ? 1.0f : weight;
}

// weights[i] = DrawWeight(SanitizeLogit(logits[i]), max, inv_temperature) for every i, vectorized
// (draw_weights.cc is compiled so that it can be). weights.size() == logits.size().
void FillDrawWeights(std::span<const float> logits, float max, float inv_temperature,
                     std::span<float> weights);

// The sum of the weights FillDrawWeights would write, without writing them: float lanes summed
// over blocks of 256, the blocks' sums added in double.
double SumDrawWeights(std::span<const float> logits, float max, float inv_temperature);

}  // namespace baton::engine

#endif  // BATON_ENGINE_DRAW_WEIGHTS_H_
