// qwen2moe: Qwen1.5-MoE and Qwen2-MoE. Qwen2's attention (biases); every layer's feed-forward
// block a mixture of experts whose softmax weights are not renormalized, plus a shared expert
// every token runs, weighted by sigmoid(ffn_gate_inp_shexp · x).
#include "absl/status/status.h"
#include "engine/architecture.h"
#include "engine/architectures/architectures.h"

namespace baton::engine::architectures {

absl::Status ConfigureQwen2Moe(const GgufFile& file, ModelConfig& c) {
  if (absl::Status s = ConfigureQwen2(file, c); !s.ok()) return s;
  return SetExperts(file, c, {.shared = true, .required = true});
}

}  // namespace baton::engine::architectures
