#include "engine/hf_config.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <initializer_list>
#include <numbers>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace baton::engine {
namespace {

using Json = nlohmann::json;

// config.json, read field by field into GGUF keys; errors name the file and the field.
class ConfigReader {
 public:
  ConfigReader(const Json& json, std::string file, std::string arch)
      : json_(json), file_(std::move(file)), arch_(std::move(arch)) {}

  absl::Status Error(const std::string& field, absl::string_view what) const {
    return absl::InvalidArgumentError(absl::StrCat(file_, ": ", field, ": ", what));
  }

  // The integer `v` (field's value, or a nested one's), within [min, 2^30]; an error naming
  // the field when absent or not.
  absl::StatusOr<int64_t> Positive(const Json& v, const std::string& field, int64_t min = 1) const {
    if (!v.is_number_integer() || v.get<int64_t>() < min || v.get<int64_t>() > (1 << 30)) {
      return Error(field, v.is_null() ? "missing"
                          : min == 1  ? "must be a positive integer"
                                      : absl::StrCat("must be an integer of at least ", min));
    }
    return v.get<int64_t>();
  }
  absl::StatusOr<int64_t> Positive(const char* field, int64_t min = 1) const {
    return Positive(json_.value(field, Json()), field, min);
  }

  // {arch}.key = the integer `v` (as Positive); null: an error when required, else no key.
  absl::Status Int(const Json& v, const std::string& field, const std::string& key, bool required,
                   int64_t min = 1) {
    if (v.is_null() && !required) return absl::OkStatus();
    absl::StatusOr<int64_t> n = Positive(v, field, min);
    if (!n.ok()) return n.status();
    AddUint(key, *n);
    return absl::OkStatus();
  }
  absl::Status Int(const char* field, const std::string& key, bool required, int64_t min = 1) {
    return Int(json_.value(field, Json()), field, key, required, min);
  }

  // {arch}.key = the positive number `v` (a field's value, or nested one's); null: no key.
  absl::Status Float(const Json& v, const std::string& field, const std::string& key) {
    if (v.is_null()) return absl::OkStatus();
    if (!v.is_number() || !(v.get<double>() > 0)) return Error(field, "must be a positive number");
    Add(key, GgufValue::Float(GgufValueType::kFloat32, v.get<double>()));
    return absl::OkStatus();
  }

  // The field's value where present, which must be `expected` (what baton runs).
  absl::Status Expect(const char* field, const Json& expected) const {
    const Json& v = json_.value(field, Json());
    if (v.is_null() || v == expected) return absl::OkStatus();
    return Error(field, absl::StrCat(v.dump(), ": baton's ", arch_, " runs ", expected.dump()));
  }

  void Add(const std::string& key, GgufValue value) {
    metadata_.emplace_back(absl::StrCat(arch_, ".", key), std::move(value));
  }
  void AddUint(const std::string& key, uint64_t v) {
    Add(key, GgufValue::Uint(GgufValueType::kUint32, v));
  }
  void AddGlobal(const std::string& key, GgufValue value) {
    metadata_.emplace_back(key, std::move(value));
  }

  const Json& json() const { return json_; }
  const std::string& arch() const { return arch_; }
  int64_t Get(const char* field, int64_t fallback) const {
    const Json& v = json_.value(field, Json());
    return v.is_number_integer() ? v.get<int64_t>() : fallback;
  }
  std::vector<std::pair<std::string, GgufValue>> Take() { return std::move(metadata_); }

 private:
  const Json& json_;
  std::string file_;
  std::string arch_;
  std::vector<std::pair<std::string, GgufValue>> metadata_;
};

absl::Status ReadChain(std::initializer_list<std::function<absl::Status()>> steps) {
  for (const auto& step : steps) {
    if (absl::Status s = step(); !s.ok()) return s;
  }
  return absl::OkStatus();
}

// RoPE parameters for one kind of layer: transformers 4's rope_theta / rope_scaling or 5's
// rope_parameters (one set, or one per layer type).
Json RopeParameters(const Json& config, const char* layer_type) {
  Json p = config.value("rope_parameters", Json());
  if (p.is_object() && p.contains(layer_type)) p = p[layer_type];
  if (!p.is_object()) {
    p = config.value("rope_scaling", Json());
    if (!p.is_object()) p = Json::object();
    if (config.contains("rope_theta")) p["rope_theta"] = config["rope_theta"];
  }
  return p;
}

// Llama 3's per-frequency divisors [rope_dims / 2], as llama.cpp's converter computes them.
std::vector<float> Llama3RopeFactors(const Json& rope, int64_t rope_dims, double base) {
  const double factor = rope.value("factor", 8.0);
  const double low = rope.value("low_freq_factor", 1.0);
  const double high = rope.value("high_freq_factor", 4.0);
  const double old_context = rope.value("original_max_position_embeddings", 8192.0);
  const double low_wavelen = old_context / low, high_wavelen = old_context / high;
  std::vector<float> factors;
  for (int64_t i = 0; i < rope_dims; i += 2) {
    const double freq = 1.0 / std::pow(base, static_cast<double>(i) / rope_dims);
    const double wavelen = 2 * std::numbers::pi / freq;
    if (wavelen < high_wavelen) {
      factors.push_back(1.0f);
    } else if (wavelen > low_wavelen) {
      factors.push_back(static_cast<float>(factor));
    } else {
      const double smooth = (old_context / wavelen - low) / (high - low);
      factors.push_back(static_cast<float>(1.0 / ((1 - smooth) / factor + smooth)));
    }
  }
  return factors;
}

// YaRN's keys. Its magnitude scale: transformers' default (1 + 0.1 ln factor on cos and sin),
// which every architecture runs, or DeepSeek's mscale_all_dim (on the scores, which only latent
// attention folds in; llama.cpp's yarn_log_multiplier).
absl::Status ReadYarn(ConfigReader& r, const Json& rope) {
  const std::string field = "rope_scaling";
  if (absl::Status s = r.Int(rope.value("original_max_position_embeddings", Json()),
                             field + ".original_max_position_embeddings",
                             "rope.scaling.original_context_length", false);
      !s.ok()) {
    return s;
  }
  for (const auto& [name, key] : {std::pair{"beta_fast", "rope.scaling.yarn_beta_fast"},
                                  std::pair{"beta_slow", "rope.scaling.yarn_beta_slow"}}) {
    if (absl::Status s = r.Float(rope.value(name, Json()), field + "." + name, key); !s.ok()) {
      return s;
    }
  }
  if (const Json& t = rope.value("truncate", Json()); !t.is_null()) {
    if (!t.is_boolean()) return r.Error(field + ".truncate", "must be true or false");
    r.Add("rope.scaling.yarn_truncate", GgufValue::Bool(t.get<bool>()));
  }
  if (rope.contains("attention_factor")) {
    return r.Error(field + ".attention_factor", "is not run (YaRN's default scale is)");
  }
  const Json& mscale = rope.value("mscale", Json());
  const Json& all_dim = rope.value("mscale_all_dim", Json());
  if (mscale.is_null() && all_dim.is_null()) return absl::OkStatus();
  if (r.arch() != "deepseek2" || !all_dim.is_number() || mscale != all_dim) {
    return r.Error(field + ".mscale",
                   "DeepSeek's magnitude scale is run only for deepseek2, with mscale_all_dim "
                   "equal to mscale");
  }
  r.Add("rope.scaling.yarn_log_multiplier",
        GgufValue::Float(GgufValueType::kFloat32, 0.1 * all_dim.get<double>()));
  return absl::OkStatus();
}

// RoPE keys for the (global) layers over `rope_dims` dims; Llama 3's factors into `factors`.
absl::Status ReadRope(ConfigReader& r, int64_t rope_dims, std::vector<float>* factors) {
  const Json rope = RopeParameters(r.json(), "full_attention");
  const double base = rope.value("rope_theta", 10000.0);
  if (absl::Status s = r.Float(rope.value("rope_theta", Json()), "rope_theta", "rope.freq_base");
      !s.ok()) {
    return s;
  }
  const std::string type = rope.value("rope_type", rope.value("type", std::string("default")));
  if (type == "default") return absl::OkStatus();
  if (type == "linear" || type == "yarn") {
    r.Add("rope.scaling.type", GgufValue::String(type));
    if (absl::Status s =
            r.Float(rope.value("factor", Json()), "rope_scaling.factor", "rope.scaling.factor");
        !s.ok()) {
      return s;
    }
    return type == "yarn" ? ReadYarn(r, rope) : absl::OkStatus();
  }
  if (type == "llama3") {
    *factors = Llama3RopeFactors(rope, rope_dims, base);
    return absl::OkStatus();
  }
  return r.Error("rope_scaling", absl::StrCat("rope type '", type,
                                              "' is not supported "
                                              "(default, linear, yarn, llama3 are)"));
}

// Query, key and value heads: num_key_value_heads and head_dim (default hidden / heads).
absl::Status ReadAttentionHeads(ConfigReader& r) {
  return ReadChain({
      [&] { return r.Int("num_key_value_heads", "attention.head_count_kv", false); },
      [&] { return r.Int("head_dim", "attention.key_length", false); },
      [&] { return r.Int("head_dim", "attention.value_length", false); },
  });
}

// The layers' window pattern from layer_types: every pattern-th layer global, the others
// sliding_attention (Gemma 3, gpt-oss); sliding_window_pattern where there is no list.
absl::Status ReadWindowPattern(ConfigReader& r) {
  const Json& config = r.json();
  int64_t pattern = config.value("sliding_window_pattern", int64_t{0});
  if (const Json& types = config.value("layer_types", Json()); types.is_array()) {
    pattern = 0;
    for (size_t l = 0; l < types.size() && pattern == 0; ++l) {
      if (types[l] == "full_attention") pattern = static_cast<int64_t>(l) + 1;
    }
    for (size_t l = 0; l < types.size(); ++l) {
      const bool global = pattern > 0 && (l + 1) % pattern == 0;
      if (types[l] != (global ? "full_attention" : "sliding_attention")) {
        return r.Error(absl::StrCat("layer_types[", l, "]"),
                       "the layers are not every n-th one global, which is what baton runs");
      }
    }
  }
  if (pattern > 0) r.AddUint("attention.sliding_window_pattern", pattern);
  return absl::OkStatus();
}

// A mixture of experts' sizes, as Qwen's, Mixtral's and gpt-oss's configs name them.
absl::Status ReadExpertSizes(ConfigReader& r) {
  const struct {
    const char* field;
    const char* key;
  } ints[] = {
      {"num_experts", "expert_count"},
      {"num_local_experts", "expert_count"},
      {"num_experts_per_tok", "expert_used_count"},
      {"moe_intermediate_size", "expert_feed_forward_length"},
      {"shared_expert_intermediate_size", "expert_shared_feed_forward_length"},
  };
  for (const auto& f : ints) {
    if (absl::Status s = r.Int(f.field, f.key, false); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status ReadLlama(ConfigReader& r) {
  return ReadChain({
      [&] { return ReadAttentionHeads(r); },
      [&] { return ReadExpertSizes(r); },
      [&] { return r.Int("sliding_window", "attention.sliding_window", false); },
  });
}

// Qwen2, Qwen3 and their mixtures: every layer a mixture (where any is) and, for the mixtures,
// the chosen experts' weights renormalized by qwen3moe, not by qwen2moe.
absl::Status ReadQwen(ConfigReader& r) {
  const Json& config = r.json();
  if (config.value("use_sliding_window", false)) {
    return r.Error("use_sliding_window", "true is not supported");
  }
  if (const Json& dense = config.value("mlp_only_layers", Json());
      !dense.is_null() && !dense.empty()) {
    return r.Error("mlp_only_layers", "dense layers among the mixtures are not run");
  }
  return ReadChain({
      [&] { return ReadAttentionHeads(r); },
      [&] { return ReadExpertSizes(r); },
      [&] { return r.Expect("decoder_sparse_step", 1); },
      [&] { return r.Expect("norm_topk_prob", r.arch() == "qwen3moe"); },
  });
}

// Gemma 3's local layers (window, RoPE base, pattern) and its query scale.
absl::Status ReadGemma3(ConfigReader& r) {
  const Json& config = r.json();
  for (const char* field : {"final_logit_softcapping", "attn_logit_softcapping"}) {
    if (!config.value(field, Json()).is_null()) return r.Error(field, "softcapping is not run");
  }
  const Json local = RopeParameters(config, "sliding_attention");
  const Json& local_base = config.contains("rope_local_base_freq")
                               ? config["rope_local_base_freq"]
                               : local.value("rope_theta", Json());
  // baton scales Gemma 3's queries as llama.cpp does (architectures/gemma3.cc), which GGUF
  // files imply: by 1/sqrt(head_dim), by 1/sqrt(hidden_size / heads) for the 62-layer 27B.
  const int64_t heads = std::max<int64_t>(1, r.Get("num_attention_heads", 1));
  const int64_t scalar = r.Get("num_hidden_layers", 0) == 62
                             ? r.Get("hidden_size", 0) / heads
                             : r.Get("head_dim", r.Get("hidden_size", 0) / heads);
  if (const Json& q = config.value("query_pre_attn_scalar", Json());
      !q.is_null() && !(q.is_number() && q.get<double>() == static_cast<double>(scalar))) {
    return r.Error("query_pre_attn_scalar", absl::StrCat(q.dump(), " differs from the ", scalar,
                                                         " that baton's gemma3 "
                                                         "scales queries by (1/sqrt of it)"));
  }
  return ReadChain({
      [&] { return ReadAttentionHeads(r); },
      [&] { return r.Int("sliding_window", "attention.sliding_window", false); },
      [&] { return r.Float(local_base, "rope_local_base_freq", "rope.freq_base_swa"); },
      [&] { return ReadWindowPattern(r); },
  });
}

// gpt-oss: every layer a mixture (its experts intermediate_size wide), local layers every other
// one, swiglu_oai with its fixed alpha and limit.
absl::Status ReadGptOss(ConfigReader& r) {
  return ReadChain({
      [&] { return ReadAttentionHeads(r); },
      [&] { return ReadExpertSizes(r); },
      [&] { return r.Int("intermediate_size", "expert_feed_forward_length", true); },
      [&] { return r.Int("sliding_window", "attention.sliding_window", true); },
      [&] { return ReadWindowPattern(r); },
      [&] { return r.Expect("swiglu_limit", 7.0); },
      [&] { return r.Expect("swiglu_alpha", 1.702); },
  });
}

// DeepSeek's latent attention as llama.cpp's converter writes it: one cached head of
// kv_lora_rank + qk_rope_head_dim values, the per-head dims as the _mla keys.
absl::Status ReadLatentAttention(ConfigReader& r) {
  if (!r.json().value("q_lora_rank", Json()).is_null()) {
    if (absl::Status s = r.Int("q_lora_rank", "attention.q_lora_rank", true); !s.ok()) return s;
  }
  int64_t rank = 0, rope = 0, nope = 0, value = 0;
  for (const auto& [field, v] :
       {std::pair{"kv_lora_rank", &rank}, std::pair{"qk_rope_head_dim", &rope},
        std::pair{"qk_nope_head_dim", &nope}, std::pair{"v_head_dim", &value}}) {
    absl::StatusOr<int64_t> n = r.Positive(field);
    if (!n.ok()) return n.status();
    *v = *n;
  }
  r.AddUint("attention.kv_lora_rank", rank);
  r.AddUint("rope.dimension_count", rope);
  r.AddUint("attention.key_length_mla", nope + rope);
  r.AddUint("attention.value_length_mla", value);
  r.AddUint("attention.head_count_kv", 1);
  r.AddUint("attention.key_length", rank + rope);
  r.AddUint("attention.value_length", rank);
  return absl::OkStatus();
}

// DeepSeek's mixtures: V2's softmax gating (greedy, no renormalizing, as transformers' V2
// runs), V3's sigmoid with the selection bias, groups and renormalizing where norm_topk_prob.
absl::Status ReadDeepseekExperts(ConfigReader& r, bool v3) {
  const Json& config = r.json();
  if (!v3) {
    const std::string method = config.value("topk_method", std::string("greedy"));
    if (method != "greedy" &&
        !(method == "group_limited_greedy" && r.Get("topk_group", 0) >= r.Get("n_group", 1))) {
      return r.Error("topk_method", absl::StrCat("'", method,
                                                 "' with topk_group below n_group is not run "
                                                 "(greedy is)"));
    }
  }
  const Json& scale = config.value("routed_scaling_factor", Json());
  const bool normalize = v3 && config.value("norm_topk_prob", false);
  r.AddUint("expert_gating_func", v3 ? 2 : 1);
  r.Add("expert_weights_norm", GgufValue::Bool(normalize));
  return ReadChain({
      [&] { return r.Int("n_routed_experts", "expert_count", true); },
      [&] { return r.Int("num_experts_per_tok", "expert_used_count", true); },
      [&] { return r.Int("moe_intermediate_size", "expert_feed_forward_length", true); },
      [&] { return r.Int("n_shared_experts", "expert_shared_count", false, 0); },
      [&] { return r.Int("first_k_dense_replace", "leading_dense_block_count", false, 0); },
      [&] { return r.Float(scale, "routed_scaling_factor", "expert_weights_scale"); },
      [&] { return v3 ? r.Int("n_group", "expert_group_count", false) : absl::OkStatus(); },
      [&] { return v3 ? r.Int("topk_group", "expert_group_used_count", false) : absl::OkStatus(); },
  });
}

absl::Status ReadDeepseekV2(ConfigReader& r) {
  return ReadChain(
      {[&] { return ReadLatentAttention(r); }, [&] { return ReadDeepseekExperts(r, false); }});
}
absl::Status ReadDeepseekV3(ConfigReader& r) {
  return ReadChain(
      {[&] { return ReadLatentAttention(r); }, [&] { return ReadDeepseekExperts(r, true); }});
}

struct Architecture {
  const char* hf;
  const char* gguf;
  absl::Status (*read)(ConfigReader&);
  bool qkv_bias = false;  // Q, K, V (and output) projections with biases
};
const Architecture kArchitectures[] = {
    {"LlamaForCausalLM", "llama", ReadLlama},
    {"MistralForCausalLM", "llama", ReadLlama},
    {"MixtralForCausalLM", "llama", ReadLlama},
    {"Qwen2ForCausalLM", "qwen2", ReadQwen, true},
    {"Qwen3ForCausalLM", "qwen3", ReadQwen},
    {"Qwen2MoeForCausalLM", "qwen2moe", ReadQwen, true},
    {"Qwen3MoeForCausalLM", "qwen3moe", ReadQwen},
    {"Gemma3ForCausalLM", "gemma3", ReadGemma3},
    {"GptOssForCausalLM", "gpt-oss", ReadGptOss, true},
    {"DeepseekV2ForCausalLM", "deepseek2", ReadDeepseekV2},
    {"DeepseekV3ForCausalLM", "deepseek2", ReadDeepseekV3},
};

// The keys every architecture has: sizes, norm epsilon, RoPE.
absl::Status ReadCommon(ConfigReader& r, std::vector<float>* rope_factors) {
  const struct {
    const char* field;
    const char* key;
  } ints[] = {
      {"max_position_embeddings", "context_length"},
      {"hidden_size", "embedding_length"},
      {"num_hidden_layers", "block_count"},
      {"num_attention_heads", "attention.head_count"},
      {"intermediate_size", "feed_forward_length"},
      {"vocab_size", "vocab_size"},
  };
  for (const auto& f : ints) {
    if (absl::Status s = r.Int(f.field, f.key, true); !s.ok()) return s;
  }
  if (absl::Status s = r.Float(r.json().value("rms_norm_eps", Json()), "rms_norm_eps",
                               "attention.layer_norm_rms_epsilon");
      !s.ok()) {
    return s;
  }
  const int64_t rope_dims =
      r.Get("qk_rope_head_dim",
            r.Get("head_dim",
                  r.Get("hidden_size", 0) / std::max<int64_t>(1, r.Get("num_attention_heads", 1))));
  return ReadRope(r, rope_dims, rope_factors);
}

}  // namespace

std::string HfArchitectureList() {
  std::string list;
  for (const Architecture& a : kArchitectures)
    absl::StrAppend(&list, list.empty() ? "" : ", ", a.hf);
  return list;
}

absl::StatusOr<HfConfig> ReadHfConfig(const Json& config, const std::string& file,
                                      const std::string& name) {
  const Json& archs = config.value("architectures", Json());
  const Architecture* arch = nullptr;
  for (const Architecture& a : kArchitectures) {
    if (archs.is_array() && !archs.empty() && archs[0] == a.hf) arch = &a;
  }
  if (arch == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(file, ": architectures: ", archs.dump(),
                                                   " is not run (", HfArchitectureList(), " are)"));
  }
  HfConfig out;
  out.architecture = arch->gguf;
  ConfigReader r(config, file, out.architecture);
  r.AddGlobal("general.architecture", GgufValue::String(out.architecture));
  r.AddGlobal("general.name", GgufValue::String(name));
  if (absl::Status s = ReadCommon(r, &out.rope_freq_factors); !s.ok()) return s;
  if (absl::Status s = arch->read(r); !s.ok()) return s;
  if (!arch->qkv_bias && config.value("attention_bias", false)) {
    return r.Error("attention_bias", "true is not supported");
  }
  if (config.value("mlp_bias", false)) return r.Error("mlp_bias", "true is not supported");
  // Quantized checkpoints: gpt-oss's MXFP4 experts (as released), which the kernels run.
  if (const Json& q = config.value("quantization_config", Json()); !q.is_null()) {
    const Json& method = q.is_object() ? q.value("quant_method", Json()) : Json();
    if (!(method == "mxfp4" && out.architecture == "gpt-oss")) {
      return r.Error("quantization_config.quant_method",
                     absl::StrCat(method.dump(),
                                  " is not run (gpt-oss's mxfp4 is; or load a "
                                  "BF16/F16/F32 checkpoint, with --quantize)"));
    }
  }
  out.rope_neox = out.architecture != "deepseek2" || !config.value("rope_interleave", true);
  out.n_layer = static_cast<int32_t>(r.Get("num_hidden_layers", 0));
  out.tied_output = config.value("tie_word_embeddings", false);
  out.metadata = r.Take();
  return out;
}

}  // namespace baton::engine
