// qwen3: Qwen3 dense models. Qwen2's layers without the biases, with an RMSNorm of every query
// and key head (attn_q_norm, attn_k_norm [head_dim]) before RoPE; the head dimension (128) is
// the file's attention.key_length, not n_embd / n_head.
#include "absl/status/status.h"
#include "engine/architecture.h"
#include "engine/architectures/architectures.h"

namespace baton::engine::architectures {

absl::Status ConfigureQwen3(const GgufFile&, ModelConfig& c) {
  c.rope_neox = true;
  LayerSpec layer = BaseLayerSpec(c);
  layer.attention.qk_norm = true;
  c.layers.assign(c.n_layer, layer);
  return absl::OkStatus();
}

}  // namespace baton::engine::architectures
