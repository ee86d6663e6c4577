// deepseek2: DeepSeek-V2, V2-Lite, V3 and their kin (llama.cpp's deepseek2 graph, from files that
// llama.cpp's converter writes for multi-head latent attention: attn_k_b and attn_v_b).
//   Attention: latent (layer_spec.h's LatentAttentionSpec) in every layer, Q through a low-rank
//   bottleneck where attention.q_lora_rank > 0; normal-style RoPE on each head's last
//   rope.dimension_count dims; the scores' scale 1/sqrt(key_length_mla), times YaRN's magnitude
//   squared where rope.scaling.yarn_log_multiplier sets it (llama.cpp's reading of it).
//   Feed-forward: the first leading_dense_block_count layers dense, the others a mixture of
//   experts (softmax or sigmoid gating, expert_gating_func; renormalized where
//   expert_weights_norm; scaled by expert_weights_scale; the V3 selection bias exp_probs_b and
//   group-limited routing where the file has them) plus expert_shared_count shared experts run
//   as one ungated expert.
//   The nextn_predict_layers multi-token-prediction blocks after the trunk are not run.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "engine/architecture.h"
#include "engine/architectures/architectures.h"
#include "engine/gguf_file.h"
#include "engine/gguf_metadata.h"

namespace baton::engine::architectures {
namespace {

// The latent attention's dimensions, checked against the cache's head (key_length,
// value_length, head_count_kv) that llama.cpp's converter writes for it.
absl::StatusOr<LatentAttentionSpec> ReadLatentAttention(const GgufFile& file,
                                                        const ModelConfig& c) {
  const std::string p = c.architecture + ".";
  LatentAttentionSpec a;
  absl::StatusOr<int32_t> v = RequiredPositive(file, p + "attention.kv_lora_rank");
  if (!v.ok()) return v.status();
  a.kv_rank = *v;
  if (!(v = OptionalCount(file, p + "attention.q_lora_rank", 0)).ok()) return v.status();
  a.q_rank = *v;
  if (file.Find(p + "attention.key_length_mla") == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        file.path(), ": ", p,
        "attention.key_length_mla is missing: a file converted before "
        "llama.cpp's latent-attention layout (attn_kv_b rather than attn_k_b and attn_v_b); "
        "convert it again with a current convert_hf_to_gguf.py"));
  }
  if (!(v = RequiredPositive(file, p + "attention.key_length_mla")).ok()) return v.status();
  a.nope_dim = *v - c.rope_n_dims;
  if (!(v = RequiredPositive(file, p + "attention.value_length_mla")).ok()) return v.status();
  a.value_dim = *v;
  if (a.nope_dim <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        file.path(), ": ", p, "attention.key_length_mla ", a.nope_dim + c.rope_n_dims,
        " leaves no dims beside the ", c.rope_n_dims, " of ", p, "rope.dimension_count"));
  }
  absl::StatusOr<int32_t> value_length =
      OptionalPositive(file, p + "attention.value_length", c.head_dim);
  if (!value_length.ok()) return value_length.status();
  if (c.n_head_kv != 1 || c.head_dim != a.kv_rank + c.rope_n_dims || *value_length != a.kv_rank) {
    return absl::InvalidArgumentError(absl::StrCat(
        file.path(), ": latent attention caches one head of kv_lora_rank + rope dims: ", p,
        "attention.head_count_kv ", c.n_head_kv, " (1), key_length ", c.head_dim, " (",
        a.kv_rank + c.rope_n_dims, "), value_length ", *value_length, " (", a.kv_rank, ")"));
  }
  return a;
}

// The scores' scale: 1/sqrt(key_length_mla), and under YaRN llama.cpp's magnitude scale
// (its TAG_DEEPSEEK2_YARN_LOG_MUL_FIX: the converter writes 0.1 * mscale_all_dim). Sets the
// RoPE's attn_factor as llama.cpp's context does, in the same float operations.
float LatentKqScale(const LatentAttentionSpec& a, ModelConfig& c) {
  const float head = static_cast<float>(a.nope_dim + c.rope_n_dims);
  if (c.rope_yarn.ext_factor == 0.0f) return 1.0f / std::sqrt(head);
  const float factor = 1.0f / c.rope_freq_scale;
  const float log_mul = c.rope_yarn.log_multiplier / 0.1f;
  // llama.cpp's get_mscale(factor, mscale) / get_mscale(factor, mscale_all_dim), both the file's
  // multiplier for deepseek2 (so 1); get_mscale(factor, 1) without one.
  float attn_factor = log_mul != 0.0f || factor <= 1.0f ? 1.0f : 0.1f * std::log(factor) + 1.0f;
  attn_factor *= 1.0f / (1.0f + 0.1f * std::log(factor));
  attn_factor *= c.rope_yarn.attn_factor;
  c.rope_yarn.attn_factor = attn_factor;
  const float original = attn_factor * (1.0f + 0.1f * std::log(factor));
  const float mscale = original * (1.0f + 0.1f * log_mul * std::log(factor));
  return mscale * mscale / std::sqrt(head);
}

// The routed and shared experts of every layer from leading_dense_block_count on.
absl::Status SetDeepseekExperts(const GgufFile& file, ModelConfig& c) {
  const std::string p = c.architecture + ".";
  absl::StatusOr<int32_t> dense = OptionalCount(file, p + "leading_dense_block_count", 0);
  if (!dense.ok()) return dense.status();
  if (*dense >= c.n_layer) return absl::OkStatus();  // no mixtures (the layers stay dense)
  const bool normalize = file.GetBool(p + "expert_weights_norm").value_or(false);
  if (absl::Status s = SetExperts(file, c, {.normalize_weights = normalize, .required = true});
      !s.ok()) {
    return s;
  }
  ExpertsSpec e = c.layers.front().feed_forward.experts;
  absl::StatusOr<int32_t> v = OptionalCount(file, p + "expert_shared_count", 0);
  if (!v.ok()) return v.status();
  e.n_ff_shared = *v * e.n_ff;
  e.shared_gate = false;
  if (!(v = OptionalCount(file, p + "expert_gating_func", 0)).ok()) return v.status();
  if (*v > 2) {
    return absl::InvalidArgumentError(absl::StrCat(file.path(), ": ", p, "expert_gating_func ", *v,
                                                   " is none of 1 (softmax), 2 (sigmoid)"));
  }
  e.gating = *v == 2 ? ExpertGating::kSigmoid : ExpertGating::kSoftmax;
  const double scale = file.GetFloat(p + "expert_weights_scale").value_or(0.0);
  e.weights_scale = scale > 0.0 ? static_cast<float>(scale) : 1.0f;
  if (!(v = OptionalCount(file, p + "expert_group_count", 1)).ok()) return v.status();
  e.groups = std::max(*v, 1);
  if (!(v = OptionalCount(file, p + "expert_group_used_count", 1)).ok()) return v.status();
  e.groups_used = std::max(*v, 1);
  if (e.count % e.groups != 0 || e.groups_used > e.groups ||
      int64_t{e.groups_used} * (e.count / e.groups) < e.used) {
    return absl::InvalidArgumentError(absl::StrCat(file.path(), ": ", p, "expert_group_count ",
                                                   e.groups, " and expert_group_used_count ",
                                                   e.groups_used, " must divide the ", e.count,
                                                   " experts into groups of which the used "
                                                   "ones hold at least expert_used_count ",
                                                   e.used));
  }
  for (int32_t l = 0; l < c.n_layer; ++l) {
    ExpertsSpec& layer = c.layers[l].feed_forward.experts;
    layer = l < *dense ? ExpertsSpec{} : e;
    layer.selection_bias =
        l >= *dense && file.FindTensor(absl::StrCat("blk.", l, ".exp_probs_b.bias")) != nullptr;
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ConfigureDeepseek2(const GgufFile& file, ModelConfig& c) {
  const std::string p = c.architecture + ".";
  // The multi-token-prediction blocks after the trunk (speculative heads) are not run.
  absl::StatusOr<int32_t> nextn = OptionalCount(file, p + "nextn_predict_layers", 0);
  if (!nextn.ok()) return nextn.status();
  if (*nextn >= c.n_layer) {
    return absl::InvalidArgumentError(absl::StrCat(file.path(), ": ", p, "nextn_predict_layers ",
                                                   *nextn, " leaves no layer of the ", c.n_layer,
                                                   " of ", p, "block_count"));
  }
  c.n_layer -= *nextn;
  if (file.Find(p + "attention.temperature_scale") != nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat(file.path(), ": ", p,
                     "attention.temperature_scale is set (Llama 4's attention "
                     "temperature tuning, which baton does not apply)"));
  }
  absl::StatusOr<LatentAttentionSpec> latent = ReadLatentAttention(file, c);
  if (!latent.ok()) return latent.status();
  c.rope_neox = false;
  LayerSpec layer = BaseLayerSpec(c);
  layer.attention.latent = *latent;
  layer.attention.kq_scale = LatentKqScale(*latent, c);
  c.layers.assign(c.n_layer, layer);
  return SetDeepseekExperts(file, c);
}

}  // namespace baton::engine::architectures
