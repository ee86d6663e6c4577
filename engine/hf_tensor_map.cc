#include "engine/hf_tensor_map.h"

#include <cstring>
#include <optional>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "kernels/cpu/dequantize.h"

namespace baton::engine {
namespace {

using Json = nlohmann::json;

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

// The GGUF name of a tensor outside the layers; nullopt for none.
std::optional<std::string> GlobalName(const std::string& hf) {
  static const std::pair<const char*, const char*> kGlobal[] = {
      {"model.embed_tokens.weight", "token_embd.weight"},
      {"model.norm.weight", "output_norm.weight"},
      {"lm_head.weight", "output.weight"},
  };
  for (const auto& [from, to] : kGlobal) {
    if (hf == from) return std::string(to);
  }
  return std::nullopt;
}

// The GGUF name (after "blk.N.") of a layer's tensor stored as GGUF stores it (`rest` follows
// "model.layers.N."); nullopt for none.
std::optional<std::string> LayerName(const std::string& rest, const std::string& arch) {
  const bool post_attention_norm = arch == "gemma3" || arch == "gpt-oss";
  const std::pair<const char*, const char*> kLayer[] = {
      {"input_layernorm.weight", "attn_norm.weight"},
      {"self_attn.q_proj.weight", "attn_q.weight"},
      {"self_attn.k_proj.weight", "attn_k.weight"},
      {"self_attn.v_proj.weight", "attn_v.weight"},
      {"self_attn.q_proj.bias", "attn_q.bias"},
      {"self_attn.k_proj.bias", "attn_k.bias"},
      {"self_attn.v_proj.bias", "attn_v.bias"},
      {"self_attn.o_proj.weight", "attn_output.weight"},
      {"self_attn.o_proj.bias", "attn_output.bias"},
      {"self_attn.q_norm.weight", "attn_q_norm.weight"},
      {"self_attn.k_norm.weight", "attn_k_norm.weight"},
      {"self_attn.sinks", "attn_sinks.weight"},
      {"post_attention_layernorm.weight",
       post_attention_norm ? "post_attention_norm.weight" : "ffn_norm.weight"},
      {"pre_feedforward_layernorm.weight", "ffn_norm.weight"},
      {"post_feedforward_layernorm.weight", "post_ffw_norm.weight"},
      {"mlp.gate_proj.weight", "ffn_gate.weight"},
      {"mlp.up_proj.weight", "ffn_up.weight"},
      {"mlp.down_proj.weight", "ffn_down.weight"},
      // A mixture's router (Qwen's, DeepSeek's; Mixtral's; gpt-oss's with its bias), DeepSeek
      // V3's selection bias, and the shared experts (Qwen's with their gate; DeepSeek's).
      {"mlp.gate.weight", "ffn_gate_inp.weight"},
      {"block_sparse_moe.gate.weight", "ffn_gate_inp.weight"},
      {"mlp.router.weight", "ffn_gate_inp.weight"},
      {"mlp.router.bias", "ffn_gate_inp.bias"},
      {"mlp.gate.e_score_correction_bias", "exp_probs_b.bias"},
      {"mlp.shared_expert.gate_proj.weight", "ffn_gate_shexp.weight"},
      {"mlp.shared_expert.up_proj.weight", "ffn_up_shexp.weight"},
      {"mlp.shared_expert.down_proj.weight", "ffn_down_shexp.weight"},
      {"mlp.shared_expert_gate.weight", "ffn_gate_inp_shexp.weight"},
      {"mlp.shared_experts.gate_proj.weight", "ffn_gate_shexp.weight"},
      {"mlp.shared_experts.up_proj.weight", "ffn_up_shexp.weight"},
      {"mlp.shared_experts.down_proj.weight", "ffn_down_shexp.weight"},
      // DeepSeek's latent attention (kv_b_proj is split: Mapper::MapKvB).
      {"self_attn.q_a_proj.weight", "attn_q_a.weight"},
      {"self_attn.q_a_layernorm.weight", "attn_q_a_norm.weight"},
      {"self_attn.q_b_proj.weight", "attn_q_b.weight"},
      {"self_attn.kv_a_proj_with_mqa.weight", "attn_kv_a_mqa.weight"},
      {"self_attn.kv_a_layernorm.weight", "attn_kv_a_norm.weight"},
  };
  for (const auto& [from, to] : kLayer) {
    if (rest == from) return std::string(to);
  }
  // A mixture's experts one by one: Qwen's and DeepSeek's names, and Mixtral's (w1 gate, w3 up,
  // w2 down); "ffn_X_exps.<e>.weight".
  static const std::pair<const char*, const char*> kPerExpert[] = {
      {"gate_proj.weight", "ffn_gate_exps"}, {"up_proj.weight", "ffn_up_exps"},
      {"down_proj.weight", "ffn_down_exps"}, {"w1.weight", "ffn_gate_exps"},
      {"w3.weight", "ffn_up_exps"},          {"w2.weight", "ffn_down_exps"},
  };
  for (const char* prefix : {"mlp.experts.", "block_sparse_moe.experts."}) {
    const std::optional<std::pair<int, std::string>> expert = SplitIndex(rest, prefix);
    if (!expert) continue;
    for (const auto& [from, to] : kPerExpert) {
      if (expert->second == from) return absl::StrCat(to, ".", expert->first, ".weight");
    }
  }
  return std::nullopt;
}

int64_t ElementBytes(kernels::DType dtype) { return kernels::RowBytes(dtype, 1); }

// A copy of `count` matrices [rows, cols] gathered from `in` (values of `elem` bytes):
// out[e][r][c] = in[e * matrix_pitch + c * row_pitch + r * col_stride + col_offset], a transpose
// that may take every col_stride-th column from col_offset.
struct Gather {
  int64_t count, rows, cols;
  int64_t matrix_pitch, row_pitch, col_stride, col_offset;
};
void GatherTransposed(const uint8_t* in, int64_t elem, const Gather& g, uint8_t* out) {
  for (int64_t e = 0; e < g.count; ++e) {
    for (int64_t r = 0; r < g.rows; ++r) {
      const uint8_t* from = in + (e * g.matrix_pitch + r * g.col_stride + g.col_offset) * elem;
      for (int64_t c = 0; c < g.cols; ++c, out += elem) {
        std::memcpy(out, from + c * g.row_pitch * elem, elem);
      }
    }
  }
}

class Mapper {
 public:
  Mapper(const std::vector<HfStoredTensor>& stored, const HfConfig& config, const Json& json,
         HfOwnedBuffers* owned)
      : config_(config), json_(json), owned_(owned) {
    for (const HfStoredTensor& s : stored) by_name_[s.tensor->name] = &s;
  }

  absl::Status Map(const HfStoredTensor& s) {
    const std::string& hf = s.tensor->name;
    if (s.tensor->dtype == kernels::DType::kI8 && !absl::EndsWith(hf, "_blocks") &&
        !absl::EndsWith(hf, "_scales")) {
      return Error(s, "is U8, which only MXFP4 blocks and scales may be");
    }
    if (std::optional<std::string> name = GlobalName(hf)) {
      if (!(config_.tied_output && *name == "output.weight")) Add(s, *name, Reversed(s), nullptr);
      return absl::OkStatus();
    }
    if (absl::EndsWith(hf, "rotary_emb.inv_freq")) return absl::OkStatus();
    const std::optional<std::pair<int, std::string>> in_layer = SplitIndex(hf, "model.layers.");
    if (!in_layer) return Error(s, absl::StrCat("is not part of a ", arch(), " model baton runs"));
    const auto& [layer, rest] = *in_layer;
    if (layer >= config_.n_layer) {
      if (arch() == "deepseek2") return absl::OkStatus();  // a multi-token-prediction block
      return Error(s, absl::StrCat("is in layer ", layer, ", past config.json's ", config_.n_layer,
                                   " num_hidden_layers"));
    }
    const std::string blk = absl::StrCat("blk.", layer, ".");
    if (std::optional<std::string> name = LayerName(rest, arch())) {
      Add(s, blk + *name, Reversed(s), nullptr);
      return absl::OkStatus();
    }
    if (arch() == "gpt-oss" && absl::StartsWith(rest, "mlp.experts.")) {
      return MapGptOssExperts(s, blk, rest.substr(std::strlen("mlp.experts.")));
    }
    if (rest == "mlp.experts.gate_up_proj") return MapFusedGateUp(s, blk);
    if (rest == "mlp.experts.down_proj" && Rank(s) == 3) {
      Add(s, blk + "ffn_down_exps.weight", Reversed(s), nullptr);
      return absl::OkStatus();
    }
    if (arch() == "deepseek2" && rest == "self_attn.kv_b_proj.weight") return MapKvB(s, blk);
    return Error(s, absl::StrCat("is not part of a ", arch(), " model baton runs"));
  }

  std::vector<HfMappedTensor> Take() { return std::move(out_); }

 private:
  const std::string& arch() const { return config_.architecture; }
  static size_t Rank(const HfStoredTensor& s) { return s.tensor->shape.size(); }
  static int64_t Dim(const HfStoredTensor& s, size_t i) { return s.tensor->shape[i]; }
  static std::vector<int64_t> Reversed(const HfStoredTensor& s) {
    return {s.tensor->shape.rbegin(), s.tensor->shape.rend()};
  }

  absl::Status Error(const HfStoredTensor& s, absl::string_view what) const {
    return absl::InvalidArgumentError(absl::StrCat(s.shard, ": tensor '", s.tensor->name, "' [",
                                                   absl::StrJoin(s.tensor->shape, ", "), "] ",
                                                   what));
  }

  // GGUF tensor `name` of `dims` (GGUF order) in the stored type (or `dtype`): a view at
  // `view_data` (null: the stored tensor's start), or a buffer made at load (`copy`).
  void Add(const HfStoredTensor& s, std::string name, std::vector<int64_t> dims,
           const uint8_t* view_data, uint8_t* copy = nullptr,
           std::optional<kernels::DType> dtype = std::nullopt) {
    if (dims.empty()) dims = {1};
    // The shared expert's gate is one row: GGUF stores it as a vector.
    if (absl::EndsWith(name, "ffn_gate_inp_shexp.weight") && dims.size() == 2 && dims[1] == 1) {
      dims.pop_back();
    }
    uint64_t n = 1;
    for (int64_t d : dims) n *= d;
    const kernels::DType type = dtype.value_or(s.tensor->dtype);
    const uint64_t bytes = n == 0 ? 0 : n / dims[0] * kernels::RowBytes(type, dims[0]);
    GgufTensorInfo info{.name = std::move(name),
                        .dims = std::move(dims),
                        .dtype = type,
                        .offset_in_data = 0,
                        .offset_in_file = 0,
                        .n_elements = n,
                        .n_bytes = bytes,
                        .data = copy != nullptr ? copy
                                : view_data     ? view_data
                                                : s.tensor->data};
    if (copy == nullptr) info.offset_in_data = info.data - s.mapping->data();
    if (arch() == "gemma3" && absl::EndsWith(info.name, "norm.weight")) AddOne(&info);
    out_.push_back({.info = std::move(info), .from = &s, .view = copy == nullptr});
  }

  // Gemma's RMSNorm scales by (1 + w); GGUF stores 1 + w, as f32.
  void AddOne(GgufTensorInfo* info) {
    std::vector<float> values(info->n_elements);
    kernels::DequantizeRow(info->dtype, info->data, values.data(),
                           static_cast<int64_t>(values.size()));
    for (float& v : values) v += 1.0f;
    info->dtype = kernels::DType::kF32;
    info->n_bytes = values.size() * sizeof(float);
    info->data = owned_->Floats(values);
    info->offset_in_data = 0;
  }

  // A copy gathered from the stored tensor, as GGUF tensor `name` of `dims` (GGUF order).
  void AddGathered(const HfStoredTensor& s, std::string name, std::vector<int64_t> dims,
                   const Gather& g) {
    const int64_t elem = ElementBytes(s.tensor->dtype);
    uint8_t* copy = owned_->Allocate(g.count * g.rows * g.cols * elem);
    GatherTransposed(s.tensor->data, elem, g, copy);
    Add(s, std::move(name), std::move(dims), nullptr, copy);
  }

  // transformers 5's mlp.experts.gate_up_proj [E, 2 * ff, hidden]: gate rows then up rows per
  // expert, each half a contiguous [ff, hidden] view.
  absl::Status MapFusedGateUp(const HfStoredTensor& s, const std::string& blk) {
    if (Rank(s) != 3 || Dim(s, 1) % 2 != 0) {
      return Error(s, "is not [experts, 2 * intermediate, hidden]");
    }
    const int64_t ff = Dim(s, 1) / 2, hidden = Dim(s, 2);
    const int64_t half_bytes = ff * hidden * ElementBytes(s.tensor->dtype);
    for (int64_t e = 0; e < Dim(s, 0); ++e) {
      const uint8_t* expert = s.tensor->data + 2 * e * half_bytes;
      Add(s, absl::StrCat(blk, "ffn_gate_exps.", e, ".weight"), {hidden, ff}, expert);
      Add(s, absl::StrCat(blk, "ffn_up_exps.", e, ".weight"), {hidden, ff}, expert + half_bytes);
    }
    return absl::OkStatus();
  }

  // gpt-oss's experts ([E, in, out], gate and up interleaved; `what` follows "mlp.experts."),
  // or as released, in MXFP4.
  absl::Status MapGptOssExperts(const HfStoredTensor& s, const std::string& blk,
                                const std::string& what) {
    for (const char* proj : {"gate_up_proj", "down_proj"}) {
      if (what == absl::StrCat(proj, "_blocks")) return MapMxfp4(s, blk, proj);
      if (what == absl::StrCat(proj, "_scales")) {
        if (by_name_.contains(
                absl::StrCat(s.tensor->name.substr(0, s.tensor->name.size() - 7), "_blocks"))) {
          return absl::OkStatus();  // read with its blocks
        }
        return Error(s, absl::StrCat("has no ", proj, "_blocks beside it"));
      }
    }
    const int64_t n = Dim(s, 0);
    if (what == "gate_up_proj" && Rank(s) == 3 && Dim(s, 2) % 2 == 0) {
      const int64_t hidden = Dim(s, 1), ff = Dim(s, 2) / 2;
      for (const auto& [part, offset] : {std::pair{"ffn_gate_exps", 0}, {"ffn_up_exps", 1}}) {
        AddGathered(s, blk + part + ".weight", {hidden, ff, n},
                    {.count = n,
                     .rows = ff,
                     .cols = hidden,
                     .matrix_pitch = hidden * 2 * ff,
                     .row_pitch = 2 * ff,
                     .col_stride = 2,
                     .col_offset = offset});
      }
      s.mapping->DropResidentPages(s.tensor->data, s.tensor->n_bytes);  // copied: read no more
      return absl::OkStatus();
    }
    if (what == "gate_up_proj_bias" && Rank(s) == 2 && Dim(s, 1) % 2 == 0) {
      const int64_t ff = Dim(s, 1) / 2;
      for (const auto& [part, offset] : {std::pair{"ffn_gate_exps", 0}, {"ffn_up_exps", 1}}) {
        AddGathered(s, blk + part + ".bias", {ff, n},
                    {.count = n,
                     .rows = ff,
                     .cols = 1,
                     .matrix_pitch = 2 * ff,
                     .row_pitch = 0,
                     .col_stride = 2,
                     .col_offset = offset});
      }
      return absl::OkStatus();
    }
    if (what == "down_proj" && Rank(s) == 3) {
      const int64_t ff = Dim(s, 1), hidden = Dim(s, 2);
      AddGathered(s, blk + "ffn_down_exps.weight", {ff, hidden, n},
                  {.count = n,
                   .rows = hidden,
                   .cols = ff,
                   .matrix_pitch = ff * hidden,
                   .row_pitch = hidden,
                   .col_stride = 1,
                   .col_offset = 0});
      s.mapping->DropResidentPages(s.tensor->data, s.tensor->n_bytes);
      return absl::OkStatus();
    }
    if (what == "down_proj_bias" && Rank(s) == 2) {
      Add(s, blk + "ffn_down_exps.bias", Reversed(s), nullptr);
      return absl::OkStatus();
    }
    return Error(s,
                 "is none of gpt-oss's experts' gate_up_proj [experts, hidden, 2 * "
                 "intermediate], down_proj [experts, intermediate, hidden] and their biases");
  }

  // gpt-oss's MXFP4 experts as released: <proj>_blocks [E, rows, groups, 16] (two E2M1 values a
  // byte, the first in the low nibble) and <proj>_scales [E, rows, groups] (E8M0 exponents),
  // rows [out, in] (gate_up's interleaved, even rows the gate): GGUF's MXFP4 blocks (the
  // exponent, then 16 bytes holding values j and j + 16 in their low and high nibbles).
  absl::Status MapMxfp4(const HfStoredTensor& blocks, const std::string& blk,
                        const std::string& proj) {
    const std::string& name = blocks.tensor->name;
    const std::string scales_name = name.substr(0, name.size() - 7) + "_scales";
    const HfStoredTensor* scales =
        by_name_.contains(scales_name) ? by_name_.at(scales_name) : nullptr;
    if (scales == nullptr) return Error(blocks, absl::StrCat("has no ", scales_name, " beside it"));
    const std::vector<int64_t>& b = blocks.tensor->shape;
    const bool gate_up = proj == "gate_up_proj";
    if (blocks.tensor->dtype != kernels::DType::kI8 ||
        scales->tensor->dtype != kernels::DType::kI8 || b.size() != 4 || b[3] != 16 ||
        scales->tensor->shape != std::vector{b[0], b[1], b[2]} || (gate_up && b[1] % 2 != 0)) {
      return Error(blocks,
                   "and its scales are not U8 MXFP4 blocks [experts, rows, groups, 16] "
                   "and scales [experts, rows, groups]");
    }
    const int64_t n = b[0], rows = b[1], groups = b[2];
    const int64_t stride = gate_up ? 2 : 1, out_rows = rows / stride;
    const std::vector<std::pair<const char*, int64_t>> parts =
        gate_up
            ? std::vector<std::pair<const char*, int64_t>>{{"ffn_gate_exps", 0}, {"ffn_up_exps", 1}}
            : std::vector<std::pair<const char*, int64_t>>{{"ffn_down_exps", 0}};
    for (const auto& [part, offset] : parts) {
      uint8_t* out = owned_->Allocate(n * out_rows * groups * 17);
      Add(blocks, blk + part + ".weight", {groups * 32, out_rows, n}, nullptr, out,
          kernels::DType::kMXFP4);
      for (int64_t e = 0; e < n; ++e) {
        for (int64_t r = 0; r < out_rows; ++r) {
          const int64_t row = (e * rows + r * stride + offset) * groups;
          for (int64_t g = 0; g < groups; ++g, out += 17) {
            const uint8_t* q = blocks.tensor->data + (row + g) * 16;
            out[0] = scales->tensor->data[row + g];
            for (int j = 0; j < 16; ++j) {
              const int lo = (q[j / 2] >> (4 * (j % 2))) & 0xf;
              const int hi = (q[(j + 16) / 2] >> (4 * (j % 2))) & 0xf;
              out[1 + j] = static_cast<uint8_t>(lo | hi << 4);
            }
          }
        }
      }
    }
    blocks.mapping->DropResidentPages(blocks.tensor->data, blocks.tensor->n_bytes);
    return absl::OkStatus();
  }

  // DeepSeek's kv_b_proj [heads * (nope + value), kv_lora_rank] as attn_k_b and attn_v_b.
  absl::Status MapKvB(const HfStoredTensor& s, const std::string& blk) {
    const int64_t heads = json_.value("num_attention_heads", 0);
    const int64_t nope = json_.value("qk_nope_head_dim", 0);
    const int64_t value = json_.value("v_head_dim", 0);
    if (Rank(s) != 2 || Dim(s, 0) != heads * (nope + value)) {
      return Error(s, absl::StrCat("is not [num_attention_heads * (qk_nope_head_dim + "
                                   "v_head_dim), kv_lora_rank] = [",
                                   heads * (nope + value), ", kv_lora_rank]"));
    }
    const int64_t rank = Dim(s, 1);
    AddGathered(s, blk + "attn_k_b.weight", {nope, rank, heads},
                {.count = heads,
                 .rows = rank,
                 .cols = nope,
                 .matrix_pitch = (nope + value) * rank,
                 .row_pitch = rank,
                 .col_stride = 1,
                 .col_offset = 0});
    const int64_t head_bytes = (nope + value) * rank * ElementBytes(s.tensor->dtype);
    const int64_t nope_bytes = nope * rank * ElementBytes(s.tensor->dtype);
    for (int64_t h = 0; h < heads; ++h) {
      Add(s, absl::StrCat(blk, "attn_v_b.", h, ".weight"), {rank, value},
          s.tensor->data + h * head_bytes + nope_bytes);
    }
    return absl::OkStatus();
  }

  const HfConfig& config_;
  const Json& json_;
  HfOwnedBuffers* owned_;
  std::vector<HfMappedTensor> out_;
  absl::flat_hash_map<std::string, const HfStoredTensor*> by_name_;
};

}  // namespace

uint8_t* HfOwnedBuffers::Allocate(uint64_t bytes) {
  buffers.push_back(std::make_unique<uint8_t[]>(bytes));
  return buffers.back().get();
}

const uint8_t* HfOwnedBuffers::Floats(const std::vector<float>& values) {
  uint8_t* buffer = Allocate(values.size() * sizeof(float));
  std::memcpy(buffer, values.data(), values.size() * sizeof(float));
  return buffer;
}

absl::StatusOr<std::vector<HfMappedTensor>> MapHfTensors(const std::vector<HfStoredTensor>& stored,
                                                         const HfConfig& config, const Json& json,
                                                         HfOwnedBuffers* owned) {
  Mapper mapper(stored, config, json, owned);
  for (const HfStoredTensor& s : stored) {
    if (absl::Status status = mapper.Map(s); !status.ok()) return status;
  }
  return mapper.Take();
}

}  // namespace baton::engine
