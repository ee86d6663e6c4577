// qwen3moe: Qwen3's mixture-of-experts models (Qwen3-30B-A3B, ...). Qwen3's attention; every
// layer's feed-forward block a mixture of {arch}.expert_count experts of which each token runs
// expert_used_count, their softmax weights renormalized to sum to 1; no shared expert.
#include "absl/status/status.h"
#include "engine/architecture.h"
#include "engine/architectures/architectures.h"

namespace baton::engine::architectures {

absl::Status ConfigureQwen3Moe(const GgufFile& file, ModelConfig& c) {
  if (absl::Status s = ConfigureQwen3(file, c); !s.ok()) return s;
  return SetExperts(file, c, {.normalize_weights = true, .required = true});
}

}  // namespace baton::engine::architectures
