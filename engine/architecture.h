// The decoder architectures baton runs, each registered by its GGUF name (general.architecture):
// an architecture turns the file's metadata into the per-layer specifications (layer_spec.h) that
// the shared Transformer runs, and says which optional tensors its layers carry.
//
// Adding an architecture: one file in engine/architectures/ with its Configure function, listed
// in architecture.cc's table. Its layers are compositions of the shared blocks; a block the
// existing ones cannot express is a new field of LayerSpec and a new shared block.
//
// Thread-safety: the registry is immutable.
#ifndef BATON_ENGINE_ARCHITECTURE_H_
#define BATON_ENGINE_ARCHITECTURE_H_

#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "engine/layer_spec.h"
#include "engine/model_config.h"

namespace baton::engine {

class GgufFile;

struct Architecture {
  std::string_view name;  // general.architecture
  // Sets what the architecture decides beyond ReadModelConfig's common hyperparameters (RoPE's
  // style, the embedding scale, config.layers: one LayerSpec per layer), reading the
  // architecture's own keys. Errors name the file and the key.
  absl::Status (*configure)(const GgufFile& file, ModelConfig& config);
};

// The registered architecture of that name, or null.
const Architecture* FindArchitecture(std::string_view name);
// The registered names, comma-separated, for error messages ("gemma3, llama, qwen2, ...").
std::string ArchitectureNames();

// The layer every architecture starts from: Llama's (RoPE from the config's base and scale,
// softmax scale 1/sqrt(head_dim), SwiGLU, no biases, no extra norms, no window, dense).
LayerSpec BaseLayerSpec(const ModelConfig& config);

// Sets config.layers by llama.cpp's sliding-window pattern: layer l is `local` unless
// l % pattern == pattern - 1, where it is `global`; the pattern is
// {arch}.attention.sliding_window_pattern, default_pattern where the file has none. Errors name
// the file and the key.
absl::Status SetWindowPattern(const GgufFile& file, int32_t default_pattern,
                              const LayerSpec& local, const LayerSpec& global,
                              ModelConfig& config);

// How an architecture's mixtures of experts weigh their experts.
struct ExpertsOptions {
  bool normalize_weights = false;  // ExpertsSpec::normalize_weights
  bool shared = false;             // a shared expert in every layer
  bool required = false;           // a file without {arch}.expert_count is an error
};

// Gives every layer of `config` the mixture of experts the keys {arch}.expert_count (absent: the
// layers stay dense, unless required), {arch}.expert_used_count (1..count),
// {arch}.expert_feed_forward_length (default config.n_ff) and, with a shared expert,
// {arch}.expert_shared_feed_forward_length (default config.n_ff) describe. Errors name the file
// and the key.
absl::Status SetExperts(const GgufFile& file, ModelConfig& config, const ExpertsOptions& options);

}  // namespace baton::engine

#endif  // BATON_ENGINE_ARCHITECTURE_H_
