// The immutable hyperparameters of a decoder, read from GGUF metadata: those every architecture
// has, and what each layer computes (layers, set by the file's architecture: architecture.h).
//
// Thread-safety: a plain value type.
#ifndef BATON_ENGINE_MODEL_CONFIG_H_
#define BATON_ENGINE_MODEL_CONFIG_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/layer_spec.h"

namespace baton::engine {

class GgufFile;

// YaRN's RoPE scaling ({arch}.rope.scaling.type yarn; kernels::RopeParams says what it computes),
// for every layer with that layer's frequency scale.
struct RopeYarn {
  float ext_factor = 0.0f;   // 1 for yarn, 0: none
  float attn_factor = 1.0f;  // {arch}.rope.scaling.attn_factor
  float beta_fast = 32.0f;   // {arch}.rope.scaling.yarn_beta_fast
  float beta_slow = 1.0f;    // {arch}.rope.scaling.yarn_beta_slow
  int32_t n_ctx_orig = 0;    // {arch}.rope.scaling.original_context_length (n_ctx_train)
  // {arch}.rope.scaling.yarn_truncate (baton's key, from a checkpoint's `truncate`; GGUF files
  // written by llama.cpp have none: true, its rule).
  bool truncate = true;
  // {arch}.rope.scaling.yarn_log_multiplier: DeepSeek's attention magnitude scale (0: none),
  // which only a latent-attention architecture folds into its scores' scale.
  float log_multiplier = 0.0f;
};

struct ModelConfig {
  std::string architecture;   // general.architecture
  std::string name;           // general.name, may be empty
  int32_t n_vocab = 0;
  int32_t n_ctx_train = 0;    // {arch}.context_length
  int32_t n_embd = 0;         // {arch}.embedding_length
  int32_t n_layer = 0;        // {arch}.block_count
  int32_t n_head = 0;         // {arch}.attention.head_count
  int32_t n_head_kv = 0;      // {arch}.attention.head_count_kv (grouped-query attention)
  // The cache's head: n_embd / n_head unless {arch}.attention.key_length says otherwise; for
  // latent attention the latent and its RoPE dims (layer_spec.h's LatentAttentionSpec).
  int32_t head_dim = 0;
  int32_t n_ff = 0;           // {arch}.feed_forward_length
  float rms_eps = 1e-5f;      // {arch}.attention.layer_norm_rms_epsilon

  // RoPE
  int32_t rope_n_dims = 0;    // {arch}.rope.dimension_count (defaults to head_dim)
  float rope_freq_base = 10000.0f;
  float rope_freq_scale = 1.0f;  // 1 / {arch}.rope.scaling.factor for linear scaling and YaRN
  RopeYarn rope_yarn;
  bool rope_neox = false;        // NeoX style (qwen2, qwen3, gemma3) or normal (llama)
  // Llama 3 rope scaling, when the file has rope_freqs.weight: per-frequency divisors
  // [rope_n_dims / 2], loaded with the weights.

  float embedding_scale = 1.0f;  // the token embeddings' scale (gemma3: sqrt(n_embd))
  // The feed-forward block's input norm's tensor, blk.N.<name>.weight (gpt-oss names it
  // post_attention_norm).
  std::string ffn_norm_tensor = "ffn_norm";
  std::vector<LayerSpec> layers; // [n_layer], what each layer computes
  std::string file_type;         // dominant weight type, informative ("Q4_1")

  int32_t q_dim() const { return n_head * head_dim; }
  int32_t kv_dim() const { return n_head_kv * head_dim; }
  // Whether the layers run latent attention (LatentAttentionSpec; an architecture's layers all
  // do or none do).
  bool latent_attention() const {
    return !layers.empty() && layers.front().attention.latent.kv_rank > 0;
  }
  // What the cache stores per token and layer: 2, K then V; 1, K alone, where attention reads V
  // from it (latent attention, whose V is the latent: K's first dims).
  int32_t kv_planes() const { return latent_attention() ? 1 : 2; }
  // Bytes of f16 KV cache per token (all layers).
  int64_t kv_bytes_per_token() const { return int64_t{kv_planes()} * n_layer * kv_dim() * 2; }
};

// Reads and validates the hyperparameters: a registered architecture, every required key present
// and positive, n_head a multiple of n_head_kv, head_dim even, rope dims <= head_dim; then the
// architecture's layer specs. The error names the file and the key.
absl::StatusOr<ModelConfig> ReadModelConfig(const GgufFile& file);

}  // namespace baton::engine

#endif  // BATON_ENGINE_MODEL_CONFIG_H_
