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

}  // namespace baton::engine
