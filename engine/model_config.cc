#include "engine/model_config.h"

#include <cmath>
#include <limits>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "engine/gguf_file.h"

namespace baton::engine {
namespace {

absl::StatusOr<int32_t> RequiredPositive(const GgufFile& file, const std::string& key) {
  absl::StatusOr<uint64_t> value = file.GetUint(key);
  if (!value.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(file.path(), ": model metadata: ", value.status().message()));
  }
  if (*value == 0 || *value > static_cast<uint64_t>(std::numeric_limits<int32_t>::max())) {
    return absl::InvalidArgumentError(
        absl::StrCat(file.path(), ": model metadata: '", key, "' = ", *value, " is out of range"));
  }
  return static_cast<int32_t>(*value);
}

absl::StatusOr<int32_t> OptionalPositive(const GgufFile& file, const std::string& key,
                                         int32_t fallback) {
  if (file.Find(key) == nullptr) return fallback;
  return RequiredPositive(file, key);
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
  if (c.architecture != "llama" && c.architecture != "qwen2") {
    return absl::InvalidArgumentError(absl::StrCat(
        file.path(), ": unsupported architecture '", c.architecture,
        "' (general.architecture); baton runs llama and qwen2 decoders"));
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

  auto read_float = [&](const std::string& key, float fallback) -> absl::StatusOr<float> {
    if (file.Find(key) == nullptr) return fallback;
    absl::StatusOr<double> d = file.GetFloat(key);
    if (!d.ok()) return d.status();
    if (!std::isfinite(*d) || *d <= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(file.path(), ": '", key, "' = ", *d, " must be positive"));
    }
    return static_cast<float>(*d);
  };
  absl::StatusOr<float> f = read_float(p + "attention.layer_norm_rms_epsilon", 1e-5f);
  if (!f.ok()) return f.status();
  c.rms_eps = *f;
  if (!(f = read_float(p + "rope.freq_base", 10000.0f)).ok()) return f.status();
  c.rope_freq_base = *f;
  std::string scaling_type = file.GetString(p + "rope.scaling.type").value_or("");
  if (scaling_type == "linear") {
    if (!(f = read_float(p + "rope.scaling.factor", 1.0f)).ok()) return f.status();
    c.rope_freq_scale = 1.0f / *f;
  } else if (!scaling_type.empty() && scaling_type != "none") {
    return absl::InvalidArgumentError(absl::StrCat(file.path(), ": unsupported ", p,
                                                   "rope.scaling.type '", scaling_type, "'"));
  }
  c.rope_neox = c.architecture == "qwen2";
  c.qkv_bias = c.architecture == "qwen2";

  // The vocabulary size comes from the token list (the tokenizer validates it); fall back to
  // {arch}.vocab_size for files without one.
  if (const GgufValue* tokens = file.Find("tokenizer.ggml.tokens");
      tokens != nullptr && tokens->is_array()) {
    c.n_vocab = static_cast<int32_t>(tokens->as_array().values.size());
  } else {
    if (!(v = RequiredPositive(file, p + "vocab_size")).ok()) return v.status();
    c.n_vocab = *v;
  }
  return c;
}

}  // namespace baton::engine
