// The weights of a decoder, as views into a mapped GGUF file: one layer struct for every
// architecture, whose optional tensors are present where the layer's spec (layer_spec.h) asks
// for them and null otherwise.
//
// Shapes use the math convention [rows, cols]; a WeightMatrix row is one output feature.
// Thread-safety: immutable after LoadModelWeights(); safe to share between threads. The views
// point into the GgufFile, which must outlive the weights.
#ifndef BATON_ENGINE_MODEL_WEIGHTS_H_
#define BATON_ENGINE_MODEL_WEIGHTS_H_

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/model_config.h"
#include "kernels/backend.h"

namespace baton::engine {

class GgufFile;

// One expert's gated FFN: views into the layer's ffn_{gate,up,down}_exps tensors.
struct ExpertWeights {
  kernels::WeightMatrix gate;  // [n_ff_expert, n_embd]
  kernels::WeightMatrix up;    // [n_ff_expert, n_embd]
  kernels::WeightMatrix down;  // [n_embd, n_ff_expert]
};

struct LayerWeights {
  const float* attn_norm = nullptr;  // f32 [n_embd]
  kernels::WeightMatrix wq;          // [q_dim, n_embd]
  kernels::WeightMatrix wk;          // [kv_dim, n_embd]
  kernels::WeightMatrix wv;          // [kv_dim, n_embd]
  const float* bq = nullptr;         // f32 [q_dim], where AttentionSpec::qkv_bias
  const float* bk = nullptr;         // f32 [kv_dim], where AttentionSpec::qkv_bias
  const float* bv = nullptr;         // f32 [kv_dim], where AttentionSpec::qkv_bias
  const float* q_norm = nullptr;     // f32 [head_dim], where AttentionSpec::qk_norm
  const float* k_norm = nullptr;     // f32 [head_dim], where AttentionSpec::qk_norm
  kernels::WeightMatrix wo;          // [n_embd, q_dim]
  const float* bo = nullptr;         // f32 [n_embd], where AttentionSpec::output_bias
  const float* attn_sinks = nullptr; // f32 [n_head], where AttentionSpec::sinks
  const float* attn_post_norm = nullptr;  // f32 [n_embd], where AttentionSpec::post_norm
  // Latent attention (AttentionSpec::latent, rope = rope_n_dims), in place of wk and wv; wq is
  // attn_q [n_head * (nope + rope), n_embd], or attn_q_b [.., q_rank] after wq_a and its norm.
  kernels::WeightMatrix wq_a;         // attn_q_a [q_rank, n_embd], where q_rank > 0
  const float* q_a_norm = nullptr;    // f32 [q_rank], where q_rank > 0
  kernels::WeightMatrix wkv_a;        // attn_kv_a_mqa [kv_rank + rope, n_embd]
  const float* kv_a_norm = nullptr;   // f32 [kv_rank]
  std::vector<kernels::WeightMatrix> wk_b;  // attn_k_b, per head [kv_rank, nope]
  std::vector<kernels::WeightMatrix> wv_b;  // attn_v_b, per head [value_dim, kv_rank]
  // wo is [n_embd, n_head * value_dim].
  const float* ffn_norm = nullptr;   // f32 [n_embd] (ModelConfig::ffn_norm_tensor)
  // The dense FFN (ffn_{gate,up,down}), or a mixture's shared expert (ffn_{gate,up,down}_shexp,
  // n_ff_shared rows); absent (null data) for a mixture without one.
  kernels::WeightMatrix w_gate;      // [n_ff, n_embd]
  kernels::WeightMatrix w_up;        // [n_ff, n_embd]
  kernels::WeightMatrix w_down;      // [n_embd, n_ff]
  // A mixture of experts (ExpertsSpec::count > 0): the router ffn_gate_inp [count, n_embd], the
  // experts [count], and the shared expert's gate ffn_gate_inp_shexp [1, n_embd] where it has one.
  kernels::WeightMatrix router;
  std::vector<ExpertWeights> experts;
  kernels::WeightMatrix shared_expert_gate;
  const float* selection_bias = nullptr;  // exp_probs_b.bias f32 [count], where selection_bias
  // Where ExpertsSpec::biases: the router's f32 [count], and the experts' f32 [count, n_ff],
  // [count, n_ff], [count, n_embd] (expert e's row e).
  const float* router_bias = nullptr;
  const float* experts_gate_bias = nullptr;
  const float* experts_up_bias = nullptr;
  const float* experts_down_bias = nullptr;
  const float* ffn_post_norm = nullptr;  // f32 [n_embd], where FeedForwardSpec::post_norm
};

struct ModelWeights {
  kernels::WeightMatrix token_embd;   // [n_vocab, n_embd]
  std::vector<LayerWeights> layers;   // [n_layer]
  const float* output_norm = nullptr; // f32 [n_embd]
  kernels::WeightMatrix output;       // [n_vocab, n_embd]; token_embd when tied
  bool tied_output = false;
  const float* rope_freq_factors = nullptr;  // f32 [rope_n_dims / 2] or null (Llama 3 scaling)

  // f32 copies of small vectors stored in another float type (f16/bf16 norms, biases).
  std::vector<std::unique_ptr<float[]>> owned;
  // The file the matrices point into (it must outlive them).
  const GgufFile* file = nullptr;
};

// Finds every tensor the config and its layer specs call for and checks its dtype
// (dequantizable) and dims. Errors name the file, the tensor, the expected and the actual shape.
absl::StatusOr<ModelWeights> LoadModelWeights(const GgufFile& file, const ModelConfig& config);

}  // namespace baton::engine

#endif  // BATON_ENGINE_MODEL_WEIGHTS_H_
