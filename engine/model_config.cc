#include "engine/model_config.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "engine/architecture.h"
#include "engine/gguf_file.h"
#include "engine/gguf_metadata.h"

namespace baton::engine {
namespace {

// YaRN's parameters from {p}rope.scaling.*, as llama.cpp reads them (its defaults: ramp ends 32
// and 1, the training context as the original one).
absl::StatusOr<RopeYarn> ReadRopeYarn(const GgufFile& file, const std::string& p,
                                      int32_t n_ctx_train) {
  RopeYarn yarn;
  yarn.ext_factor = 1.0f;
  absl::StatusOr<float> f;
  if (!(f = OptionalPositiveFloat(file, p + "rope.scaling.attn_factor", 1.0f)).ok()) {
    return f.status();
  }
  yarn.attn_factor = *f;
  if (!(f = OptionalPositiveFloat(file, p + "rope.scaling.yarn_beta_fast", 32.0f)).ok()) {
    return f.status();
  }
  yarn.beta_fast = *f;
  if (!(f = OptionalPositiveFloat(file, p + "rope.scaling.yarn_beta_slow", 1.0f)).ok()) {
    return f.status();
  }
  yarn.beta_slow = *f;
  absl::StatusOr<int32_t> v =
      OptionalPositive(file, p + "rope.scaling.original_context_length", n_ctx_train);
  if (!v.ok()) return v.status();
  yarn.n_ctx_orig = *v;
  yarn.truncate = file.GetBool(p + "rope.scaling.yarn_truncate").value_or(true);
  if (!(f = OptionalPositiveFloat(file, p + "rope.scaling.yarn_log_multiplier", 0.0f)).ok()) {
    return f.status();
  }
  yarn.log_multiplier = *f;
  return yarn;
}

}  // namespace

absl::StatusOr<ModelConfig> ReadModelConfig(const GgufFile& file) {
  ModelConfig c;
  absl::StatusOr<std::string> arch = file.GetString("general.architecture");
  if (!arch.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(file.path(), ": model metadata: ", arch.status().message()));
  }
  c.architecture = *arch;
  const Architecture* architecture = FindArchitecture(c.architecture);
  if (architecture == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        file.path(), ": unsupported architecture '", c.architecture,
        "' (general.architecture); baton runs ", ArchitectureNames()));
  }
  c.name = file.GetString("general.name").value_or("");
  const std::string p = c.architecture + ".";

  absl::StatusOr<int32_t> v;
  if (!(v = RequiredPositive(file, p + "context_length")).ok()) return v.status();
  c.n_ctx_train = *v;
  if (!(v = RequiredPositive(file, p + "embedding_length")).ok()) return v.status();
  c.n_embd = *v;
  if (!(v = RequiredPositive(file, p + "block_count")).ok()) return v.status();
  c.n_layer = *v;
  if (!(v = RequiredPositive(file, p + "attention.head_count")).ok()) return v.status();
  c.n_head = *v;
  if (!(v = OptionalPositive(file, p + "attention.head_count_kv", c.n_head)).ok()) return v.status();
  c.n_head_kv = *v;
  if (!(v = RequiredPositive(file, p + "feed_forward_length")).ok()) return v.status();
  c.n_ff = *v;
  if (c.n_embd % c.n_head != 0 && file.Find(p + "attention.key_length") == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(file.path(), ": embedding_length ", c.n_embd,
                                                   " is not a multiple of head_count ", c.n_head));
  }
  if (!(v = OptionalPositive(file, p + "attention.key_length", c.n_embd / c.n_head)).ok()) {
    return v.status();
  }
  c.head_dim = *v;
  if (!(v = OptionalPositive(file, p + "attention.value_length", c.head_dim)).ok()) {
    return v.status();
  }
  const int32_t value_length = *v;
  if (c.n_head % c.n_head_kv != 0) {
    return absl::InvalidArgumentError(absl::StrCat(file.path(), ": head_count ", c.n_head,
                                                   " is not a multiple of head_count_kv ",
                                                   c.n_head_kv));
  }
  if (c.head_dim % 2 != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(file.path(), ": head dimension ", c.head_dim, " is odd"));
  }
  if (!(v = OptionalPositive(file, p + "rope.dimension_count", c.head_dim)).ok()) return v.status();
  c.rope_n_dims = *v;
  if (c.rope_n_dims > c.head_dim || c.rope_n_dims % 2 != 0) {
    return absl::InvalidArgumentError(absl::StrCat(file.path(), ": ", p, "rope.dimension_count ",
                                                   c.rope_n_dims, " must be even and <= ",
                                                   c.head_dim));
  }

  absl::StatusOr<float> f =
      OptionalPositiveFloat(file, p + "attention.layer_norm_rms_epsilon", 1e-5f);
  if (!f.ok()) return f.status();
  c.rms_eps = *f;
  if (!(f = OptionalPositiveFloat(file, p + "rope.freq_base", 10000.0f)).ok()) return f.status();
  c.rope_freq_base = *f;
  std::string scaling_type = file.GetString(p + "rope.scaling.type").value_or("");
  if (scaling_type == "linear" || scaling_type == "yarn") {
    if (!(f = OptionalPositiveFloat(file, p + "rope.scaling.factor", 1.0f)).ok()) {
      return f.status();
    }
    c.rope_freq_scale = 1.0f / *f;
  }
  if (scaling_type == "yarn") {
    absl::StatusOr<RopeYarn> yarn = ReadRopeYarn(file, p, c.n_ctx_train);
    if (!yarn.ok()) return yarn.status();
    c.rope_yarn = *yarn;
  } else if (scaling_type != "linear" && !scaling_type.empty() && scaling_type != "none") {
    return absl::InvalidArgumentError(absl::StrCat(file.path(), ": unsupported ", p,
                                                   "rope.scaling.type '", scaling_type, "'"));
  }

  // The vocabulary size comes from the token list (the tokenizer validates it); fall back to
  // {arch}.vocab_size for files without one.
  if (const GgufValue* tokens = file.Find("tokenizer.ggml.tokens");
      tokens != nullptr && tokens->is_array()) {
    c.n_vocab = static_cast<int32_t>(tokens->as_array().values.size());
  } else {
    if (!(v = RequiredPositive(file, p + "vocab_size")).ok()) return v.status();
    c.n_vocab = *v;
  }
  if (absl::Status s = architecture->configure(file, c); !s.ok()) return s;
  // Latent attention's V is the latent, a prefix of K (its architecture checks the lengths).
  const bool latent = c.latent_attention();
  if (value_length != c.head_dim && !latent) {
    return absl::InvalidArgumentError(absl::StrCat(
        file.path(), ": ", p, "attention.value_length ", value_length,
        " differs from the key length ", c.head_dim,
        "; baton runs models whose K and V heads have one size"));
  }
  if (c.rope_yarn.log_multiplier != 0.0f && !latent) {
    return absl::InvalidArgumentError(absl::StrCat(
        file.path(), ": ", p, "rope.scaling.yarn_log_multiplier is set (DeepSeek's YaRN "
        "magnitude scale), which only latent-attention models (deepseek2) take"));
  }
  return c;
}

}  // namespace baton::engine
