#include "engine/architecture.h"

#include <cmath>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/architectures/architectures.h"
#include "engine/gguf_file.h"
#include "engine/gguf_metadata.h"

namespace baton::engine {
namespace {

constexpr Architecture kArchitectures[] = {
    {"deepseek2", architectures::ConfigureDeepseek2},
    {"gemma3", architectures::ConfigureGemma3}, {"gpt-oss", architectures::ConfigureGptOss},
    {"llama", architectures::ConfigureLlama},
    {"qwen2", architectures::ConfigureQwen2},   {"qwen2moe", architectures::ConfigureQwen2Moe},
    {"qwen3", architectures::ConfigureQwen3},   {"qwen3moe", architectures::ConfigureQwen3Moe},
};

}  // namespace

const Architecture* FindArchitecture(std::string_view name) {
  for (const Architecture& a : kArchitectures) {
    if (a.name == name) return &a;
  }
  return nullptr;
}

std::string ArchitectureNames() {
  return absl::StrJoin(kArchitectures, ", ",
                       [](std::string* out, const Architecture& a) { out->append(a.name); });
}

LayerSpec BaseLayerSpec(const ModelConfig& config) {
  LayerSpec spec;
  spec.attention.rope_freq_base = config.rope_freq_base;
  spec.attention.rope_freq_scale = config.rope_freq_scale;
  spec.attention.kq_scale = 1.0f / std::sqrt(static_cast<float>(config.head_dim));
  return spec;
}

absl::Status SetWindowPattern(const GgufFile& file, int32_t default_pattern,
                              const LayerSpec& local, const LayerSpec& global,
                              ModelConfig& config) {
  absl::StatusOr<int32_t> pattern = OptionalPositive(
      file, config.architecture + ".attention.sliding_window_pattern", default_pattern);
  if (!pattern.ok()) return pattern.status();
  config.layers.clear();
  for (int32_t l = 0; l < config.n_layer; ++l) {
    config.layers.push_back(l % *pattern < *pattern - 1 ? local : global);
  }
  return absl::OkStatus();
}

absl::Status SetExperts(const GgufFile& file, ModelConfig& config, const ExpertsOptions& options) {
  const std::string p = config.architecture + ".";
  ExpertsSpec experts;
  experts.normalize_weights = options.normalize_weights;
  absl::StatusOr<int32_t> v = OptionalPositive(file, p + "expert_count", 0);
  if (!v.ok()) return v.status();
  experts.count = *v;
  if (experts.count == 0) {
    if (!options.required) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrCat(file.path(), ": ", p,
                                                   "expert_count is missing; a ",
                                                   config.architecture, " model has experts"));
  }
  if (!(v = RequiredPositive(file, p + "expert_used_count")).ok()) return v.status();
  experts.used = *v;
  if (experts.used > experts.count) {
    return absl::InvalidArgumentError(absl::StrCat(file.path(), ": ", p, "expert_used_count ",
                                                   experts.used, " exceeds ", p, "expert_count ",
                                                   experts.count));
  }
  if (!(v = OptionalPositive(file, p + "expert_feed_forward_length", config.n_ff)).ok()) {
    return v.status();
  }
  experts.n_ff = *v;
  if (options.shared) {
    v = OptionalPositive(file, p + "expert_shared_feed_forward_length", config.n_ff);
    if (!v.ok()) return v.status();
    experts.n_ff_shared = *v;
  }
  for (LayerSpec& layer : config.layers) layer.feed_forward.experts = experts;
  return absl::OkStatus();
}

}  // namespace baton::engine
