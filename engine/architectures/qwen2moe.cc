// qwen2moe: Qwen1.5-MoE and Qwen2-MoE. Qwen2's attention (biases); every layer's feed-forward
// block a mixture of experts whose softmax weights are not renormalized, plus a shared expert
// every token runs, weighted by sigmoid(ffn_gate_inp_shexp · x).
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "engine/architecture.h"
#include "engine/architectures/architectures.h"
#include "engine/gguf_file.h"

namespace baton::engine::architectures {

absl::Status ConfigureQwen2Moe(const GgufFile& file, ModelConfig& c) {
  if (absl::Status s = ConfigureQwen2(file, c); !s.ok()) return s;
  absl::StatusOr<ExpertsSpec> experts =
      ReadExpertsSpec(file, c, /*normalize_weights=*/false, /*shared=*/true);
  if (!experts.ok()) return experts.status();
  if (experts->count == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        file.path(), ": qwen2moe.expert_count is missing; a qwen2moe model has experts"));
  }
  for (LayerSpec& layer : c.layers) layer.feed_forward.experts = *experts;
  return absl::OkStatus();
}

}  // namespace baton::engine::architectures
