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
};

enum class FeedForwardActivation {
  kSiluGated,  // silu(gate) * up (SwiGLU: Llama, Qwen)
  kGeluGated,  // gelu(gate) * up, tanh approximation (GeGLU: Gemma)
  // g * sigmoid(1.702 g) * (u + 1) with g = min(gate, 7), u = clamp(up, -7, 7) (gpt-oss)
  kSwigluOai,
};

// A mixture of experts in place of the dense feed-forward: the router (ffn_gate_inp
// [count, n_embd]) scores the experts, a softmax over them gives probabilities, each token runs
// the `used` most probable experts (ffn_{gate,up,down}_exps: `count` gated FFNs of n_ff), and
// their outputs are summed weighted by those probabilities (renormalized to sum to 1 where
// normalize_weights), the most probable first.
struct ExpertsSpec {
  int32_t count = 0;  // 0: a dense block
  int32_t used = 0;
  int32_t n_ff = 0;
  bool normalize_weights = false;
  // > 0: a shared expert (ffn_{gate,up,down}_shexp of n_ff_shared) that every token runs, added
  // last with the weight sigmoid(ffn_gate_inp_shexp · x) (qwen2moe).
  int32_t n_ff_shared = 0;
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
