#include "engine/draw_weights.h"

namespace baton::engine {

void FillDrawWeights(std::span<const float> logits, float max, float inv_temperature,
                     std::span<float> weights) {
  // 16 at a time through a local array: a loop shape the compiler vectorizes at -O2.
  constexpr size_t kLanes = 16;
  size_t i = 0;
  for (; i + kLanes <= logits.size(); i += kLanes) {
    float lanes[kLanes];
    for (size_t j = 0; j < kLanes; ++j) {
      lanes[j] = DrawWeight(SanitizeLogit(logits[i + j]), max, inv_temperature);
    }
    std::copy(lanes, lanes + kLanes, weights.begin() + i);
  }
  for (; i < logits.size(); ++i) {
    weights[i] = DrawWeight(SanitizeLogit(logits[i]), max, inv_temperature);
  }
}

double SumDrawWeights(std::span<const float> logits, float max, float inv_temperature) {
  constexpr size_t kLanes = 16;
  constexpr size_t kBlock = 256;
  double sum = 0.0;
  size_t i = 0;
  for (; i + kBlock <= logits.size(); i += kBlock) {
    float lanes[kLanes] = {};
    for (size_t b = i; b < i + kBlock; b += kLanes) {
      for (size_t j = 0; j < kLanes; ++j) {
        lanes[j] += DrawWeight(SanitizeLogit(logits[b + j]), max, inv_temperature);
      }
    }
    for (const float lane : lanes) sum += lane;
  }
  for (; i < logits.size(); ++i) sum += DrawWeight(SanitizeLogit(logits[i]), max, inv_temperature);
  return sum;
}

}  // namespace baton::engine
