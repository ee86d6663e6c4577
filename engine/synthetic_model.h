// Decoder models with random weights, written as real GGUF files with the project's
// GGUF writer: the engine's unit tests run on tiny ones (fast, deterministic from a seed), and
// `baton make-model` writes large ones in the shapes of real models for benchmarks (a GPU, a
// weight type) where only the arithmetic matters, not what the model says.
//
// The vocabulary is byte-level BPE ("gpt2" model, "gpt-2" pre-tokenizer): the 256 byte tokens,
// a few merges, <|endoftext|> (BOS/EOS, control), then unused filler tokens up to n_vocab.
// Weights are N(0, 1/cols), norms near 1, encoded by kernels/cpu/quantize.h (round to nearest).
//
// Thread-safety: pure functions.
#ifndef BATON_ENGINE_SYNTHETIC_MODEL_H_
#define BATON_ENGINE_SYNTHETIC_MODEL_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/dtype.h"

namespace baton::engine {

// How the matrices' types are chosen.
enum class SyntheticMix {
  kUniform,  // every matrix weight_dtype
  // llama-quantize's Q4_K_M in outline: attn_v, ffn_down and output Q6_K, the other matrices
  // Q4_K (llama.cpp gives attn_v and ffn_down Q6_K in about half of the layers; here all).
  kQ4_K_M,
};

struct SyntheticModelOptions {
  uint64_t seed = 1;
  // "llama", "qwen2" (adds QKV biases), "qwen3" (per-head Q/K norms), "gemma3" (Q/K norms,
  // post-norms, GeGLU, local sliding-window layers where sliding_window > 0), "qwen3moe" and
  // "qwen2moe" (experts, the latter with a shared expert), "gpt-oss" (QKV and output biases,
  // attention sinks, biased experts, even layers local where sliding_window > 0, YaRN where
  // rope_yarn_factor > 0), "deepseek2" (latent attention, leading dense layers, routed and
  // shared experts); llama with n_expert > 0 is Mixtral's layout.
  std::string architecture = "llama";
  int32_t n_layer = 2;
  int32_t n_embd = 64;
  int32_t n_head = 4;
  int32_t n_head_kv = 2;
  int32_t head_dim = 0;        // 0: n_embd / n_head (else written as attention.key_length)
  int32_t sliding_window = 0;  // > 0: {arch}.attention.sliding_window (llama, gemma3)
  // Experts (llama, qwen3moe, qwen2moe): n_expert of n_ff_expert each (0: n_ff), n_expert_used
  // per token; qwen2moe's shared expert has n_ff_shared (0: n_ff).
  int32_t n_expert = 0;
  int32_t n_expert_used = 0;
  int32_t n_ff_expert = 0;
  int32_t n_ff_shared = 0;
  int32_t n_ff = 96;
  int32_t n_ctx = 256;
  int32_t n_vocab = 0;  // 0: the byte-level vocabulary alone (262 tokens); else at least 262
  float rope_freq_base = 10000.0f;
  // > 0: rope.scaling.type yarn with this factor over an original context of n_ctx / factor.
  float rope_yarn_factor = 0.0f;
  float rope_yarn_log_multiplier = 0.0f;  // > 0: rope.scaling.yarn_log_multiplier (deepseek2)
  // deepseek2: the latent attention (head_count_kv 1, head_dim kv_lora_rank + qk_rope_dim);
  // q_lora_rank 0: Q straight from x.
  int32_t kv_lora_rank = 0;
  int32_t q_lora_rank = 0;
  int32_t qk_nope_dim = 0;
  int32_t qk_rope_dim = 0;
  int32_t v_head_dim = 0;
  // deepseek2's experts: the first leading_dense layers dense; n_expert_shared shared experts of
  // n_ff_expert; sigmoid gating (else softmax) with a selection bias, in expert_groups groups of
  // which expert_groups_used count (0: no groups); weights renormalized and scaled.
  int32_t leading_dense = 0;
  int32_t n_expert_shared = 0;
  bool sigmoid_gating = false;
  bool selection_bias = false;
  int32_t expert_groups = 0;
  int32_t expert_groups_used = 0;
  bool expert_weights_norm = false;
  float expert_weights_scale = 0.0f;  // 0: none (written as 1)
  // Any type kernels::CanQuantize takes. A K-quant matrix whose rows are not a multiple of 256
  // falls back as llama-quantize's does: Q2_K, Q3_K -> Q4_0; Q4_K -> Q5_0; Q5_K -> Q5_1;
  // Q6_K -> Q8_0.
  kernels::DType weight_dtype = kernels::DType::kF32;
  SyntheticMix mix = SyntheticMix::kUniform;
  bool tied_output = true;
};

// Writes the model to `path`. INVALID_ARGUMENT for options no model can have (a weight type
// without an encoder, head counts that do not divide, a vocabulary too small).
absl::Status WriteSyntheticModel(const std::string& path, const SyntheticModelOptions& options);

// The type of the matrix `tensor` (a GGUF tensor name, e.g. "blk.3.ffn_down.weight") with rows of
// `n_cols` values: options' (or the mix's), else llama-quantize's fallback where its block does
// not divide the rows (a K-quant's 32-value kin, then F16).
kernels::DType SyntheticTensorType(const SyntheticModelOptions& options, std::string_view tensor,
                                   int64_t n_cols);

// The shapes of real models (dimensions, vocabulary, context, RoPE base, tied output), weights
// F32 until the caller picks: kSyntheticShapes, "tiny" being the defaults above. NOT_FOUND naming
// the shapes for any other name.
extern const char kSyntheticShapes[];
absl::StatusOr<SyntheticModelOptions> SyntheticShape(std::string_view name);

}  // namespace baton::engine

#endif  // BATON_ENGINE_SYNTHETIC_MODEL_H_
