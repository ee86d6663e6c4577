// llama: Llama 2/3, SmolLM2, Mistral. Pre-norm layers, normal-style RoPE (Llama 3's frequency
// factors where the file has rope_freqs.weight), SwiGLU. A file that declares
// llama.attention.sliding_window (Mistral 7B v0.1) attends in that window on every layer, as
// transformers' Mistral does (llama.cpp ignores the key). A file with llama.expert_count (Mixtral)
// has a mixture of experts in every layer, the chosen experts' weights renormalized.
#include "absl/status/status.h"
#include "engine/architecture.h"
#include "engine/architectures/architectures.h"
#include "engine/gguf_metadata.h"

namespace baton::engine::architectures {

absl::Status ConfigureLlama(const GgufFile& file, ModelConfig& c) {
  absl::StatusOr<int32_t> window = OptionalPositive(file, "llama.attention.sliding_window", 0);
  if (!window.ok()) return window.status();
  c.rope_neox = false;
  LayerSpec layer = BaseLayerSpec(c);
  layer.attention.window = *window;
  c.layers.assign(c.n_layer, layer);
  return SetExperts(file, c, {.normalize_weights = true});
}

}  // namespace baton::engine::architectures
