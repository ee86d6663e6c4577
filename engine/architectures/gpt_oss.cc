// gpt-oss: OpenAI's open-weight mixtures of experts (gpt-oss-20b, gpt-oss-120b; llama.cpp's
// openai-moe graph). Q, K, V and the output projection with biases; each head's attention sink
// in its softmax's denominator; NeoX-style RoPE with the file's scaling (YaRN for the released
// models); the layers alternate a local one (gpt-oss.attention.sliding_window, even layers by
// gpt-oss.attention.sliding_window_pattern's default 2) and a global one, both with the file's
// RoPE base unless gpt-oss.rope.freq_base_swa sets the local one's. Every feed-forward block is
// a mixture of experts: the router's logits with a bias, the top expert_used_count experts
// weighted by the softmax of their logits (the softmax over all, renormalized over the chosen:
// the same weights), each expert's products with biases and swiglu_oai between them. The FFN's
// input norm is named post_attention_norm.
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "engine/architecture.h"
#include "engine/architectures/architectures.h"
#include "engine/gguf_file.h"
#include "engine/gguf_metadata.h"

namespace baton::engine::architectures {

absl::Status ConfigureGptOss(const GgufFile& file, ModelConfig& c) {
  const std::string p = c.architecture + ".";
  absl::StatusOr<int32_t> window = RequiredPositive(file, p + "attention.sliding_window");
  if (!window.ok()) return window.status();
  absl::StatusOr<float> local_base =
      OptionalPositiveFloat(file, p + "rope.freq_base_swa", c.rope_freq_base);
  if (!local_base.ok()) return local_base.status();
  c.rope_neox = true;
  c.ffn_norm_tensor = "post_attention_norm";
  LayerSpec global = BaseLayerSpec(c);
  global.attention.qkv_bias = true;
  global.attention.output_bias = true;
  global.attention.sinks = true;
  global.feed_forward.activation = FeedForwardActivation::kSwigluOai;
  LayerSpec local = global;
  local.attention.window = *window;
  local.attention.rope_freq_base = *local_base;
  if (absl::Status s = SetWindowPattern(file, 2, local, global, c); !s.ok()) return s;
  if (absl::Status s = SetExperts(file, c, {.normalize_weights = true, .required = true});
      !s.ok()) {
    return s;
  }
  for (LayerSpec& layer : c.layers) layer.feed_forward.experts.biases = true;
  return absl::OkStatus();
}

}  // namespace baton::engine::architectures
