#include "engine/hf_checkpoint.h"

#include <cmath>
#include <cstring>
#include <filesystem>
#include <numbers>
#include <set>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "engine/json_file.h"
#include "engine/safetensors_file.h"
#include "engine/tokenizer_json.h"
#include "kernels/cpu/dequantize.h"
#include "kernels/cpu/quantize.h"
#include "nlohmann/json.hpp"

namespace baton::engine {
namespace {

using Json = nlohmann::json;
namespace fs = std::filesystem;
using Metadata = std::vector<std::pair<std::string, GgufValue>>;

struct ArchitectureName {
  const char* hf;
  const char* gguf;
};
constexpr ArchitectureName kArchitectures[] = {
    {"LlamaForCausalLM", "llama"},       {"MistralForCausalLM", "llama"},
    {"MixtralForCausalLM", "llama"},     {"Qwen2ForCausalLM", "qwen2"},
    {"Qwen3ForCausalLM", "qwen3"},       {"Qwen2MoeForCausalLM", "qwen2moe"},
    {"Qwen3MoeForCausalLM", "qwen3moe"}, {"Gemma3ForCausalLM", "gemma3"},
};

std::string ArchitectureList() {
  std::string list;
  for (const ArchitectureName& a : kArchitectures) {
    absl::StrAppend(&list, list.empty() ? "" : ", ", a.hf);
  }
  return list;
}

// config.json, read field by field into GGUF keys; errors name the file and the field.
class ConfigReader {
 public:
  ConfigReader(const Json& json, std::string file, std::string arch)
      : json_(json), file_(std::move(file)), arch_(std::move(arch)) {}

  absl::Status Error(const std::string& field, absl::string_view what) const {
    return absl::InvalidArgumentError(absl::StrCat(file_, ": ", field, ": ", what));
  }

  // {arch}.key = the positive integer field; absent: an error when required, else no key.
  absl::Status Int(const char* field, const std::string& key, bool required) {
    const Json& v = json_.value(field, Json());
    if (v.is_null() && !required) return absl::OkStatus();
    if (!v.is_number_integer() || v.get<int64_t>() <= 0 || v.get<int64_t>() > (1 << 30)) {
      return Error(field, v.is_null() ? "missing" : "must be a positive integer");
    }
    Add(key, GgufValue::Uint(GgufValueType::kUint32, v.get<uint64_t>()));
    return absl::OkStatus();
  }

  // {arch}.key = the positive number `v` (a field's value, or nested one's); null: no key.
  absl::Status Float(const Json& v, const std::string& field, const std::string& key) {
    if (v.is_null()) return absl::OkStatus();
    if (!v.is_number() || !(v.get<double>() > 0)) return Error(field, "must be a positive number");
    Add(key, GgufValue::Float(GgufValueType::kFloat32, v.get<double>()));
    return absl::OkStatus();
  }

  void Add(const std::string& key, GgufValue value) {
    metadata_.emplace_back(absl::StrCat(arch_, ".", key), std::move(value));
  }
  void AddGlobal(const std::string& key, GgufValue value) {
    metadata_.emplace_back(key, std::move(value));
  }

  const Json& json() const { return json_; }
  Metadata Take() { return std::move(metadata_); }

 private:
  const Json& json_;
  std::string file_;
  std::string arch_;
  Metadata metadata_;
};

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

// Llama 3's per-frequency divisors [head_dim / 2], as llama.cpp's converter computes them.
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

// RoPE keys for the (global) layers; Llama 3 factors into `llama3_factors`.
absl::Status ReadRope(ConfigReader& r, int64_t head_dim, std::vector<float>* llama3_factors) {
  const Json rope = RopeParameters(r.json(), "full_attention");
  const double base = rope.value("rope_theta", 10000.0);
  if (absl::Status s = r.Float(rope.value("rope_theta", Json()), "rope_theta", "rope.freq_base");
      !s.ok()) {
    return s;
  }
  std::string type = rope.value("rope_type", rope.value("type", std::string("default")));
  if (type == "default") return absl::OkStatus();
  if (type == "linear" || type == "yarn") {
    r.Add("rope.scaling.type", GgufValue::String(type));
    if (absl::Status s =
            r.Float(rope.value("factor", Json()), "rope_scaling.factor", "rope.scaling.factor");
        !s.ok()) {
      return s;
    }
    if (type == "yarn") {
      if (absl::Status s = r.Float(rope.value("original_max_position_embeddings", Json()),
                                   "rope_scaling.original_max_position_embeddings",
                                   "rope.scaling.original_context_length");
          !s.ok()) {
        return s;
      }
    }
    return absl::OkStatus();
  }
  if (type == "llama3") {
    *llama3_factors = Llama3RopeFactors(rope, head_dim, base);
    return absl::OkStatus();
  }
  return r.Error("rope_scaling", absl::StrCat("rope type '", type,
                                              "' is not supported "
                                              "(default, linear, yarn, llama3 are)"));
}

// Gemma 3's local layers: window, RoPE base, pattern (every pattern-th layer global).
absl::Status ReadGemma3(ConfigReader& r) {
  const Json& config = r.json();
  for (const char* field : {"final_logit_softcapping", "attn_logit_softcapping"}) {
    if (!config.value(field, Json()).is_null()) return r.Error(field, "softcapping is not run");
  }
  if (absl::Status s = r.Int("sliding_window", "attention.sliding_window", false); !s.ok()) {
    return s;
  }
  const Json local = RopeParameters(config, "sliding_attention");
  const Json& local_base = config.contains("rope_local_base_freq")
                               ? config["rope_local_base_freq"]
                               : local.value("rope_theta", Json());
  if (absl::Status s = r.Float(local_base, "rope_local_base_freq", "rope.freq_base_swa"); !s.ok()) {
    return s;
  }
  // baton scales Gemma 3's queries as llama.cpp does (architectures/gemma3.cc), which GGUF
  // files imply: by 1/sqrt(head_dim), by 1/sqrt(hidden_size / heads) for the 62-layer 27B.
  const int64_t heads = std::max(1, config.value("num_attention_heads", 1));
  const int64_t scalar = config.value("num_hidden_layers", 0) == 62
                             ? config.value("hidden_size", 0) / heads
                             : config.value("head_dim", config.value("hidden_size", 0) / heads);
  if (const Json& q = config.value("query_pre_attn_scalar", Json());
      !q.is_null() && !(q.is_number() && q.get<double>() == static_cast<double>(scalar))) {
    return r.Error("query_pre_attn_scalar", absl::StrCat(q.dump(), " differs from the ", scalar,
                                                         " that baton's gemma3 "
                                                         "scales queries by (1/sqrt of it)"));
  }
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
  if (pattern > 0)
    r.Add("attention.sliding_window_pattern", GgufValue::Uint(GgufValueType::kUint32, pattern));
  return absl::OkStatus();
}

// A mixture of experts: its sizes, and the routing baton's architecture runs (every layer
// sparse; the chosen experts' weights renormalized by qwen3moe and Mixtral, not by qwen2moe).
absl::Status ReadExperts(ConfigReader& r, const std::string& arch) {
  const Json& config = r.json();
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
  if (config.value("decoder_sparse_step", 1) != 1) {
    return r.Error("decoder_sparse_step", "only 1 (every layer a mixture) is run");
  }
  if (const Json& dense = config.value("mlp_only_layers", Json());
      !dense.is_null() && !dense.empty()) {
    return r.Error("mlp_only_layers", "dense layers among the mixtures are not run");
  }
  if (const Json& norm = config.value("norm_topk_prob", Json()); !norm.is_null()) {
    const bool renormalized = arch != "qwen2moe";
    if (norm != renormalized) {
      return r.Error("norm_topk_prob", absl::StrCat(norm.dump(), ": baton's ", arch, " runs ",
                                                    renormalized ? "true" : "false"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<Metadata> ConfigToMetadata(const Json& config, const std::string& file,
                                          const std::string& arch, const std::string& name,
                                          std::vector<float>* llama3_factors) {
  ConfigReader r(config, file, arch);
  r.AddGlobal("general.architecture", GgufValue::String(arch));
  r.AddGlobal("general.name", GgufValue::String(name));
  const struct {
    const char* field;
    const char* key;
    bool required;
  } ints[] = {
      {"max_position_embeddings", "context_length", true},
      {"hidden_size", "embedding_length", true},
      {"num_hidden_layers", "block_count", true},
      {"num_attention_heads", "attention.head_count", true},
      {"num_key_value_heads", "attention.head_count_kv", false},
      {"intermediate_size", "feed_forward_length", true},
      {"head_dim", "attention.key_length", false},
      {"head_dim", "attention.value_length", false},
      {"vocab_size", "vocab_size", true},
  };
  for (const auto& f : ints) {
    if (absl::Status s = r.Int(f.field, f.key, f.required); !s.ok()) return s;
  }
  if (absl::Status s = r.Float(config.value("rms_norm_eps", Json()), "rms_norm_eps",
                               "attention.layer_norm_rms_epsilon");
      !s.ok()) {
    return s;
  }
  const int64_t head_dim =
      config.value("head_dim", Json()).is_number_integer()
          ? config["head_dim"].get<int64_t>()
          : config.value("hidden_size", 0) / std::max(1, config.value("num_attention_heads", 1));
  if (absl::Status s = ReadRope(r, head_dim, llama3_factors); !s.ok()) return s;
  if (absl::Status s = ReadExperts(r, arch); !s.ok()) return s;
  if (arch == "gemma3") {
    if (absl::Status s = ReadGemma3(r); !s.ok()) return s;
  } else if (arch == "llama") {
    if (absl::Status s = r.Int("sliding_window", "attention.sliding_window", false); !s.ok()) {
      return s;
    }
  } else if (config.value("use_sliding_window", false)) {
    return r.Error("use_sliding_window", "true is not supported");
  }
  // Qwen2's Q/K/V biases are its architecture's; no other bias is run.
  const bool qkv_bias = arch == "qwen2" || arch == "qwen2moe";
  if (!qkv_bias && config.value("attention_bias", false)) {
    return r.Error("attention_bias", "true is not supported");
  }
  if (config.value("mlp_bias", false)) return r.Error("mlp_bias", "true is not supported");
  return r.Take();
}

// `name` as "<prefix><i>.<rest>": i and rest; nullopt otherwise.
std::optional<std::pair<int, std::string>> SplitIndex(absl::string_view name,
                                                      absl::string_view prefix) {
  if (!absl::StartsWith(name, prefix)) return std::nullopt;
  name.remove_prefix(prefix.size());
  const size_t dot = name.find('.');
  int index = 0;
  if (dot == absl::string_view::npos || !absl::SimpleAtoi(name.substr(0, dot), &index)) {
    return std::nullopt;
  }
  return std::make_pair(index, std::string(name.substr(dot + 1)));
}

// A mixture's experts' matrices (`rest` follows "model.layers.N."), stored one by one
// ("blk.N.ffn_up_exps.<e>.weight"; model_weights.cc stacks them). Qwen's names and Mixtral's
// (w1 gate, w3 up, w2 down).
std::optional<std::string> ExpertGgufName(const std::string& rest, int layer) {
  static const std::pair<const char*, const char*> kPerExpert[] = {
      {"gate_proj.weight", "ffn_gate_exps"}, {"up_proj.weight", "ffn_up_exps"},
      {"down_proj.weight", "ffn_down_exps"}, {"w1.weight", "ffn_gate_exps"},
      {"w3.weight", "ffn_up_exps"},          {"w2.weight", "ffn_down_exps"},
  };
  for (const char* prefix : {"mlp.experts.", "block_sparse_moe.experts."}) {
    const std::optional<std::pair<int, std::string>> expert = SplitIndex(rest, prefix);
    if (!expert) continue;
    for (const auto& [from, to] : kPerExpert) {
      if (expert->second == from) {
        return absl::StrCat("blk.", layer, ".", to, ".", expert->first, ".weight");
      }
    }
  }
  return std::nullopt;
}

// The GGUF name of a Hugging Face tensor; "" for one to ignore; nullopt for one no rule maps.
std::optional<std::string> GgufName(const std::string& hf, const std::string& arch) {
  static const std::pair<const char*, const char*> kGlobal[] = {
      {"model.embed_tokens.weight", "token_embd.weight"},
      {"model.norm.weight", "output_norm.weight"},
      {"lm_head.weight", "output.weight"},
  };
  for (const auto& [from, to] : kGlobal) {
    if (hf == from) return std::string(to);
  }
  if (absl::EndsWith(hf, "rotary_emb.inv_freq")) return std::string();
  const std::optional<std::pair<int, std::string>> in_layer = SplitIndex(hf, "model.layers.");
  if (!in_layer) return std::nullopt;
  const auto& [layer, rest] = *in_layer;
  const bool gemma = arch == "gemma3";
  const std::pair<const char*, const char*> kLayer[] = {
      {"input_layernorm.weight", "attn_norm.weight"},
      {"self_attn.q_proj.weight", "attn_q.weight"},
      {"self_attn.k_proj.weight", "attn_k.weight"},
      {"self_attn.v_proj.weight", "attn_v.weight"},
      {"self_attn.q_proj.bias", "attn_q.bias"},
      {"self_attn.k_proj.bias", "attn_k.bias"},
      {"self_attn.v_proj.bias", "attn_v.bias"},
      {"self_attn.o_proj.weight", "attn_output.weight"},
      {"self_attn.q_norm.weight", "attn_q_norm.weight"},
      {"self_attn.k_norm.weight", "attn_k_norm.weight"},
      {"post_attention_layernorm.weight", gemma ? "post_attention_norm.weight" : "ffn_norm.weight"},
      {"pre_feedforward_layernorm.weight", "ffn_norm.weight"},
      {"post_feedforward_layernorm.weight", "post_ffw_norm.weight"},
      {"mlp.gate_proj.weight", "ffn_gate.weight"},
      {"mlp.up_proj.weight", "ffn_up.weight"},
      {"mlp.down_proj.weight", "ffn_down.weight"},
      // A mixture's router and shared expert (Qwen's, Mixtral's).
      {"mlp.gate.weight", "ffn_gate_inp.weight"},
      {"block_sparse_moe.gate.weight", "ffn_gate_inp.weight"},
      {"mlp.shared_expert.gate_proj.weight", "ffn_gate_shexp.weight"},
      {"mlp.shared_expert.up_proj.weight", "ffn_up_shexp.weight"},
      {"mlp.shared_expert.down_proj.weight", "ffn_down_shexp.weight"},
      {"mlp.shared_expert_gate.weight", "ffn_gate_inp_shexp.weight"},
  };
  for (const auto& [from, to] : kLayer) {
    if (rest == from) return absl::StrCat("blk.", layer, ".", to);
  }
  return ExpertGgufName(rest, layer);
}

// The shard files: model.safetensors.index.json's weight_map values, else model.safetensors.
absl::StatusOr<std::vector<fs::path>> ShardPaths(const fs::path& dir) {
  const fs::path index = dir / "model.safetensors.index.json";
  if (!fs::exists(index)) {
    if (!fs::exists(dir / "model.safetensors")) {
      return absl::NotFoundError(absl::StrCat(
          dir.string(), ": neither model.safetensors nor model.safetensors.index.json"));
    }
    return std::vector<fs::path>{dir / "model.safetensors"};
  }
  absl::StatusOr<Json> json = ReadJsonObjectFile(index.string());
  if (!json.ok()) return json.status();
  const Json& map = json->value("weight_map", Json());
  if (!map.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(index.string(), ": weight_map: not an object"));
  }
  std::set<std::string> names;
  for (const auto& [tensor, shard] : map.items()) {
    if (!shard.is_string() || shard.get<std::string>().find('/') != std::string::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat(index.string(), ": weight_map: '", tensor, "': not a file name"));
    }
    names.insert(shard.get<std::string>());
  }
  std::vector<fs::path> paths;
  for (const std::string& name : names) {
    if (!fs::exists(dir / name)) {
      return absl::NotFoundError(absl::StrCat(index.string(), ": weight_map names shard '", name,
                                              "', which is not in ", dir.string()));
    }
    paths.push_back(dir / name);
  }
  return paths;
}

// Storage of tensors made at load (Gemma's norms, quantized matrices, RoPE factors).
struct OwnedTensors {
  std::vector<std::unique_ptr<uint8_t[]>> buffers;

  const uint8_t* Floats(const std::vector<float>& values) {
    auto buffer = std::make_unique<uint8_t[]>(values.size() * sizeof(float));
    std::memcpy(buffer.get(), values.data(), values.size() * sizeof(float));
    buffers.push_back(std::move(buffer));
    return buffers.back().get();
  }
};

std::vector<float> ToFloats(const SafetensorsTensor& t, int64_t n) {
  std::vector<float> out(n);
  kernels::DequantizeRow(t.dtype, t.data, out.data(), n);
  return out;
}

// `info` re-stored as `dtype` row by row (its dims[0] a multiple of the type's block); only its
// type and size when `describe_only`. The stored tensor's pages in `mapping` go once read.
void Quantize(const SafetensorsTensor& t, const MappedFile& mapping, kernels::DType dtype,
              bool describe_only, GgufTensorInfo* info, OwnedTensors* owned) {
  const int64_t cols = info->dims[0], rows = static_cast<int64_t>(info->n_elements) / cols;
  const int64_t row_bytes = kernels::RowBytes(dtype, cols);
  info->dtype = dtype;
  info->n_bytes = rows * row_bytes;
  if (describe_only) {
    info->data = nullptr;
    return;
  }
  auto buffer = std::make_unique<uint8_t[]>(rows * row_bytes);
  std::vector<float> row(cols);
  const int64_t in_row_bytes = kernels::RowBytes(t.dtype, cols);
  for (int64_t r = 0; r < rows; ++r) {
    kernels::DequantizeRow(t.dtype, t.data + r * in_row_bytes, row.data(), cols);
    kernels::QuantizeRow(dtype, row.data(), cols, buffer.get() + r * row_bytes);
  }
  info->data = buffer.get();
  owned->buffers.push_back(std::move(buffer));
  mapping.DropResidentPages(t.data, t.n_bytes);
}

bool IsMatrix(const GgufTensorInfo& info) {
  return info.dims.size() == 2 && absl::EndsWith(info.name, ".weight") &&
         !absl::EndsWith(info.name, "norm.weight");
}

// One safetensors tensor as a GGUF one (dims reversed), adjusted as the architecture needs.
GgufTensorInfo ToGguf(const SafetensorsTensor& t, const MappedFile& mapping,
                      const std::string& name, const std::string& arch, const LoadOptions& options,
                      OwnedTensors* owned) {
  GgufTensorInfo info{.name = name,
                      .dims = {t.shape.rbegin(), t.shape.rend()},
                      .dtype = t.dtype,
                      .offset_in_data = 0,
                      .offset_in_file = 0,
                      .n_elements = 1,
                      .n_bytes = t.n_bytes,
                      .data = t.data};
  if (info.dims.empty()) info.dims = {1};
  // The shared expert's gate is one row: GGUF stores it as a vector.
  if (absl::EndsWith(name, "ffn_gate_inp_shexp.weight") && info.dims.size() == 2 &&
      info.dims[1] == 1) {
    info.dims.pop_back();
  }
  for (int64_t d : info.dims) info.n_elements *= d;
  if (arch == "gemma3" && absl::EndsWith(name, "norm.weight")) {
    // Gemma's RMSNorm scales by (1 + w); GGUF stores 1 + w.
    std::vector<float> values = ToFloats(t, static_cast<int64_t>(info.n_elements));
    for (float& v : values) v += 1.0f;
    info.dtype = kernels::DType::kF32;
    info.n_bytes = values.size() * sizeof(float);
    info.data = owned->Floats(values);
  } else if (options.quantize && IsMatrix(info) && *options.quantize != t.dtype &&
             info.dims[0] % kernels::Traits(*options.quantize).block_size == 0) {
    Quantize(t, mapping, *options.quantize, !options.weights, &info, owned);
  }
  return info;
}

// OpenHfCheckpoint's work; nlohmann may throw where a field has an unexpected type.
absl::StatusOr<HfCheckpoint> ReadCheckpoint(const std::string& dir_name,
                                            const LoadOptions& options) {
  const fs::path dir(dir_name);
  const std::string config_file = (dir / "config.json").string();
  absl::StatusOr<Json> config = ReadJsonObjectFile(config_file);
  if (!config.ok()) return config.status();
  const Json& archs = config->value("architectures", Json());
  std::string arch;
  for (const ArchitectureName& a : kArchitectures) {
    if (archs.is_array() && !archs.empty() && archs[0] == a.hf) arch = a.gguf;
  }
  if (arch.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(config_file, ": architectures: ", archs.dump(),
                                                   " is not run (", ArchitectureList(), " are)"));
  }
  if (options.quantize && !kernels::CanQuantize(*options.quantize)) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot quantize to ", std::string(kernels::DTypeName(*options.quantize))));
  }
  std::vector<float> llama3_factors;
  absl::StatusOr<Metadata> metadata =
      ConfigToMetadata(*config, config_file, arch, dir.filename().string(), &llama3_factors);
  if (!metadata.ok()) return metadata.status();

  absl::StatusOr<std::vector<fs::path>> shards = ShardPaths(dir);
  if (!shards.ok()) return shards.status();
  HfCheckpoint checkpoint;
  std::vector<GgufTensorInfo> tensors;
  std::vector<std::shared_ptr<const MappedFile>> mappings;
  OwnedTensors owned;
  uint64_t size = 0;
  const bool tied = config->value("tie_word_embeddings", false);
  for (const fs::path& shard : *shards) {
    absl::StatusOr<std::unique_ptr<SafetensorsFile>> file = SafetensorsFile::Open(shard.string());
    if (!file.ok()) return file.status();
    size += (*file)->size();
    for (const SafetensorsTensor& t : (*file)->tensors()) {
      const std::optional<std::string> name = GgufName(t.name, arch);
      if (!name) {
        return absl::InvalidArgumentError(absl::StrCat(shard.string(), ": tensor '", t.name,
                                                       "' is not part of a ", arch,
                                                       " model baton runs"));
      }
      if (name->empty() || (tied && *name == "output.weight")) continue;
      GgufTensorInfo info = ToGguf(t, (*file)->mapping(), *name, arch, options, &owned);
      info.offset_in_data = static_cast<uint64_t>(t.data - (*file)->mapping().data());
      if (checkpoint.sources.contains(*name)) {
        return absl::InvalidArgumentError(
            absl::StrCat(shard.string(), ": tensor '", t.name, "' appears twice"));
      }
      checkpoint.sources[*name] = absl::StrCat(t.name, " in ", shard.filename().string());
      tensors.push_back(std::move(info));
    }
    // The tensors view the mapping, which the assembled file keeps.
    std::shared_ptr<SafetensorsFile> shared = std::move(*file);
    mappings.push_back(std::shared_ptr<const MappedFile>(shared, &shared->mapping()));
  }
  if (!llama3_factors.empty()) {
    const int64_t n = static_cast<int64_t>(llama3_factors.size());
    tensors.push_back({.name = "rope_freqs.weight",
                       .dims = {n},
                       .dtype = kernels::DType::kF32,
                       .offset_in_data = 0,
                       .offset_in_file = 0,
                       .n_elements = uint64_t(n),
                       .n_bytes = uint64_t(n) * 4,
                       .data = owned.Floats(llama3_factors)});
  }
  absl::StatusOr<Vocab> vocab = LoadTokenizerJson(dir.string());
  if (!vocab.ok()) return vocab.status();
  checkpoint.vocab = *std::move(vocab);
  checkpoint.rope_neox = true;  // Hugging Face's Q/K row order (header comment)
  checkpoint.file = GgufFile::Assemble(dir.string(), size, *std::move(metadata), std::move(tensors),
                                       std::move(mappings), std::move(owned.buffers));
  return checkpoint;
}

}  // namespace

bool IsHfCheckpointDir(const std::string& path) {
  std::error_code ec;
  return fs::is_directory(path, ec) && fs::exists(fs::path(path) / "config.json", ec);
}

absl::StatusOr<HfCheckpoint> OpenHfCheckpoint(const std::string& dir, const LoadOptions& options) {
  try {
    return ReadCheckpoint(dir, options);
  } catch (const nlohmann::json::exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat(dir, ": a field of an unexpected type in its JSON files: ", e.what()));
  }
}

}  // namespace baton::engine
