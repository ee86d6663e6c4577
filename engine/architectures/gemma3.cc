// gemma3: Gemma 3 text models (llama.cpp's gemma3 graph). The embeddings scaled by
// sqrt(n_embd); per-head Q/K RMSNorm; Q scaled by 1/sqrt(head_dim) before the product with K
// (the softmax scale is 1); RMSNorms after the attention and the feed-forward blocks as well as
// before; GeGLU; NeoX-style RoPE. Where the file gives gemma3.attention.sliding_window, five of
// every six layers (gemma3.attention.sliding_window_pattern, default 6: layer l is local unless
// l % 6 == 5) are local: they attend in that window with RoPE base
// gemma3.rope.freq_base_swa (default 10000) unscaled; the others are global with the file's
// RoPE base and scaling. The norm weights in the file already include Gemma's "1 +".
// A sliding_window_pattern given as an array of per-layer flags is not read (an error naming
// the key).
#include <cmath>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "engine/architecture.h"
#include "engine/architectures/architectures.h"
#include "engine/gguf_file.h"
#include "engine/gguf_metadata.h"

namespace baton::engine::architectures {

absl::Status ConfigureGemma3(const GgufFile& file, ModelConfig& c) {
  absl::StatusOr<int32_t> window = OptionalPositive(file, "gemma3.attention.sliding_window", 0);
  if (!window.ok()) return window.status();
  absl::StatusOr<float> local_base = OptionalPositiveFloat(file, "gemma3.rope.freq_base_swa", 1e4f);
  if (!local_base.ok()) return local_base.status();
  if (file.Find("gemma3.final_logit_softcapping") != nullptr &&
      file.GetFloat("gemma3.final_logit_softcapping").value_or(1.0) != 0.0) {
    return absl::InvalidArgumentError(absl::StrCat(
        file.path(), ": gemma3.final_logit_softcapping is set; baton runs Gemma 3 without it"));
  }
  c.rope_neox = true;
  c.embedding_scale = std::sqrt(static_cast<float>(c.n_embd));
  LayerSpec global = BaseLayerSpec(c);
  global.attention.qk_norm = true;
  global.attention.post_norm = true;
  // Gemma 3 27B (62 layers) scales Q by 1/sqrt(n_embd / n_head), the others by
  // 1/sqrt(head_dim): its query_pre_attn_scalar, which the GGUF file does not carry (llama.cpp
  // decides by the layer count alike).
  global.attention.query_scale =
      c.n_layer == 62 ? 1.0f / std::sqrt(static_cast<float>(c.n_embd / c.n_head))
                      : global.attention.kq_scale;
  global.attention.kq_scale = 1.0f;
  global.feed_forward.activation = FeedForwardActivation::kGeluGated;
  global.feed_forward.post_norm = true;
  LayerSpec local = global;
  local.attention.window = *window;
  local.attention.rope_freq_base = *local_base;
  local.attention.rope_freq_scale = 1.0f;
  return SetWindowPattern(file, 6, *window > 0 ? local : global, global, c);
}

}  // namespace baton::engine::architectures
