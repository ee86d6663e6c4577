// What one decoder layer computes, decided at load from the model's architecture and metadata
// (engine/architecture.h): the Transformer runs every architecture's layers from these specs
// with the same shared blocks (attention, feed-forward, norms), never from the architecture's
// name.
//
// Thread-safety: plain value types.
#ifndef BATON_ENGINE_LAYER_SPEC_H_
#define BATON_ENGINE_LAYER_SPEC_H_

#include <cstdint>

namespace baton::engine {

// Multi-head latent attention (DeepSeek-V2/V3; llama.cpp's deepseek2 with the absorption): K and
// V of every head are one compressed latent per token, so the cache holds one "head" of
// kv_rank + rope dims (ModelConfig::head_dim, n_head_kv 1) instead of n_head heads of K and V.
//   latent [n, kv_rank + rope] = attn_kv_a_mqa · x; its first kv_rank dims RMSNorm'd
//     (attn_kv_a_norm), its last rope dims rotated: the cached K (and V, whose last rope dims
//     nothing reads);
//   q [n, n_head, nope + rope] = attn_q · x, or attn_q_b · norm(attn_q_a · x) where q_rank > 0;
//   each head's query [kv_rank + rope] = (attn_k_b[h] · q_nope, rope(q_pe));
//   attention over the latents gives each head [kv_rank] (of its kv_rank + rope outputs);
//   attn_v_b[h] lifts it to [value_dim]; attn_output [n_embd, n_head * value_dim] · that.
struct LatentAttentionSpec {
  int32_t kv_rank = 0;    // 0: ordinary attention; attention.kv_lora_rank
  int32_t q_rank = 0;     // attention.q_lora_rank; 0: Q straight from x
  int32_t nope_dim = 0;   // each head's query and key dims without RoPE
  int32_t value_dim = 0;  // each head's value dims (attention.value_length_mla)
};

// The attention block: x -> norm -> Q, K, V (+ bias) -> [per-head Q/K norm] -> RoPE ->
// [Q * query_scale] -> attention (softmax(Q·Kᵀ * kq_scale) over the window, [with each head's
// sink in the denominator]) -> output projection (+ bias) -> [post-norm], then added to the
// residual stream.
struct AttentionSpec {
  float rope_freq_base = 10000.0f;
  float rope_freq_scale = 1.0f;  // 1 / linear scaling factor
  // > 0: the layer attends to the last `window` positions only (sliding-window attention, a local
  // layer); 0: to every earlier position.
  int32_t window = 0;
  bool qkv_bias = false;     // attn_{q,k,v}.bias [q_dim | kv_dim]
  bool qk_norm = false;      // attn_q_norm, attn_k_norm [head_dim]: RMSNorm of each head
  bool post_norm = false;    // attn_post_norm [n_embd]: RMSNorm of the block's output
  bool output_bias = false;  // attn_output.bias [n_embd]
  // attn_sinks [n_head]: each head's learned logit in its softmax's denominator, with no value
  // (gpt-oss; kernels::Backend::Attention).
  bool sinks = false;
  float query_scale = 1.0f;  // Q's scale before the product with K (Gemma); 1: none
  float kq_scale = 1.0f;     // the scores' scale inside the softmax
  LatentAttentionSpec latent;  // kv_rank > 0: this block instead of Q, K, V (above)
};

enum class FeedForwardActivation {
  kSiluGated,  // silu(gate) * up (SwiGLU: Llama, Qwen)
  kGeluGated,  // gelu(gate) * up, tanh approximation (GeGLU: Gemma)
  // g * sigmoid(1.702 g) * (u + 1) with g = min(gate, 7), u = clamp(up, -7, 7) (gpt-oss)
  kSwigluOai,
};

// How the router's logits become the experts' probabilities.
enum class ExpertGating {
  kSoftmax,  // over all experts
  kSigmoid,  // each expert's own (DeepSeek-V3)
};

// A mixture of experts in place of the dense feed-forward: the router (ffn_gate_inp
// [count, n_embd]) scores the experts, the gating gives probabilities, each token runs the
// `used` most probable experts (ffn_{gate,up,down}_exps: `count` gated FFNs of n_ff), and their
// outputs are summed weighted by those probabilities (renormalized to sum to 1 where
// normalize_weights, then times weights_scale), the most probable first.
struct ExpertsSpec {
  int32_t count = 0;  // 0: a dense block
  int32_t used = 0;
  int32_t n_ff = 0;
  bool normalize_weights = false;
  ExpertGating gating = ExpertGating::kSoftmax;
  float weights_scale = 1.0f;  // expert_weights_scale
  // exp_probs_b.bias [count] added to the probabilities to choose the experts, not to weigh them
  // (DeepSeek-V3's load balancing).
  bool selection_bias = false;
  // > 1: the experts form `groups` equal groups; a token chooses among the experts of its
  // `groups_used` best groups only, a group's score the sum of its two best (biased)
  // probabilities (DeepSeek-V3's group-limited routing).
  int32_t groups = 1;
  int32_t groups_used = 1;
  // > 0: a shared expert (ffn_{gate,up,down}_shexp of n_ff_shared) that every token runs, added
  // last: with the weight sigmoid(ffn_gate_inp_shexp · x) where shared_gate (qwen2moe), else 1
  // (deepseek2).
  int32_t n_ff_shared = 0;
  bool shared_gate = true;
  // The router's logits get ffn_gate_inp.bias [count], and each expert's gate, up and down
  // products their rows of ffn_{gate,up,down}_exps.bias [count, n_ff | n_ff | n_embd] (gpt-oss).
  bool biases = false;
};

// The feed-forward block: x -> norm -> gate, up -> activation -> down (dense, or a mixture of
// experts) -> [post-norm], then added to the residual stream.
struct FeedForwardSpec {
  FeedForwardActivation activation = FeedForwardActivation::kSiluGated;
  bool post_norm = false;  // ffn_post_norm [n_embd]
  ExpertsSpec experts;
};

struct LayerSpec {
  AttentionSpec attention;
  FeedForwardSpec feed_forward;
};

}  // namespace baton::engine

#endif  // BATON_ENGINE_LAYER_SPEC_H_
