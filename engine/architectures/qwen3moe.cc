// qwen3moe: Qwen3's mixture-of-experts models (Qwen3-30B-A3B, ...). Qwen3's attention; every
// layer's feed-forward block a mixture of {arch}.expert_count experts of which each token runs
// expert_used_count, their softmax weights renormalized to sum to 1; no shared expert.
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "engine/architecture.h"
#include "engine/architectures/architectures.h"
#include "engine/gguf_file.h"

namespace baton::engine::architectures {

absl::Status ConfigureQwen3Moe(const GgufFile& file, ModelConfig& c) {
  if (absl::Status s = ConfigureQwen3(file, c); !s.ok()) return s;
  absl::StatusOr<ExpertsSpec> experts =
      ReadExpertsSpec(file, c, /*normalize_weights=*/true, /*shared=*/false);
  if (!experts.ok()) return experts.status();
  if (experts->count == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        file.path(), ": qwen3moe.expert_count is missing; a qwen3moe model has experts"));
  }
  for (LayerSpec& layer : c.layers) layer.feed_forward.experts = *experts;
  return absl::OkStatus();
}

}  // namespace baton::engine::architectures
