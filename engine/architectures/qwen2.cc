// qwen2: Qwen2 and Qwen2.5. Llama's layers with Q, K and V biases and NeoX-style RoPE.
#include "absl/status/status.h"
#include "engine/architecture.h"
#include "engine/architectures/architectures.h"

namespace baton::engine::architectures {

absl::Status ConfigureQwen2(const GgufFile&, ModelConfig& c) {
  c.rope_neox = true;
  LayerSpec layer = BaseLayerSpec(c);
  layer.attention.qkv_bias = true;
  c.layers.assign(c.n_layer, layer);
  return absl::OkStatus();
}

}  // namespace baton::engine::architectures
