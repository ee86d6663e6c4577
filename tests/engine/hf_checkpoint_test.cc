// Hugging Face checkpoints: the committed tiny checkpoints that transformers made from the tiny
// synthetic models (scripts/reference/make_hf_checkpoints.py --tiny; F32, BF16, F16) scored
// against transformers' own log-probabilities and against llama.cpp's on the GGUF they came
// from; sharded checkpoints; quantizing at load; safetensors parsing; and the errors of bad
// checkpoints, each naming the file and the field or tensor.
#include "engine/hf_checkpoint.h"

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "engine/model.h"
#include "engine/safetensors_file.h"
#include "kernels/cpu/dequantize.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/kl_agreement.h"
#include "tests/support/temp_path.h"
#include "tests/support/test_paths.h"

namespace baton::engine {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

std::string Checkpoint(const std::string& shape) {
  return test_support::SourcePath("tests/data/hf/" + shape);
}

// Measured (AVX2): mean KLD below 1e-6 against transformers (the base file's rounding) and 4e-5
// against llama.cpp's F32 GGUF for the BF16 checkpoint; the same top token everywhere but 2 of
// 126 positions (BF16 against F32). The mixtures of experts (F32, experts stored one by one;
// written by make_hf_checkpoints.py itself, since transformers cannot read them from GGUF): below
// 1e-6 against both. A wrong mapping (Q/K order, Gemma's norms, the query scale, the window
// pattern, an expert's gate and up swapped) scores orders of magnitude above the bars.
class HfAgreementTest : public testing::TestWithParam<std::string> {};

TEST_P(HfAgreementTest, AgreesWithTransformers) {
  test_support::ExpectKlAgreement(Checkpoint(GetParam()),
                                  "tests/data/hf/" + GetParam() + ".transformers_c128.kld", 1e-4,
                                  0.99, GetParam() + " vs transformers");
}

TEST_P(HfAgreementTest, AgreesWithLlamaCppOnTheGguf) {
  test_support::ExpectKlAgreement(Checkpoint(GetParam()),
                                  "tests/data/engine/arch_" + GetParam() + "_c128.kld", 1e-3, 0.95,
                                  GetParam() + " vs llama.cpp");
}

INSTANTIATE_TEST_SUITE_P(Shapes, HfAgreementTest,
                         testing::Values("tiny", "tiny-qwen3", "tiny-gemma3", "tiny-qwen3moe",
                                         "tiny-qwen2moe", "tiny-mixtral", "tiny-gpt-oss",
                                         "tiny-deepseek2", "tiny-deepseek3"),
                         [](const auto& info) {
                           std::string name = info.param;
                           for (char& c : name) c = c == '-' ? '_' : c;
                           return name;
                         });

TEST(HfCheckpointTest, SeenAsGguf) {
  absl::StatusOr<HfCheckpoint> c = OpenHfCheckpoint(Checkpoint("tiny-qwen3"));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->rope_neox);
  EXPECT_EQ(c->file->GetString("general.architecture").value_or(""), "qwen3");
  EXPECT_EQ(c->file->GetUint("qwen3.attention.key_length").value_or(0), 32u);
  const GgufTensorInfo* q = c->file->FindTensor("blk.1.attn_q.weight");
  ASSERT_NE(q, nullptr);
  EXPECT_EQ(q->dims, (std::vector<int64_t>{64, 128}));  // HF [128, 64], reversed
  EXPECT_EQ(q->dtype, kernels::DType::kBF16);
  EXPECT_EQ(c->sources.at("blk.1.attn_q.weight"),
            "model.layers.1.self_attn.q_proj.weight in model.safetensors");
  EXPECT_EQ(c->file->FindTensor("output.weight"), nullptr);  // tied

  absl::StatusOr<std::unique_ptr<Model>> model = Model::Load(Checkpoint("tiny-qwen3"));
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ((*model)->id(), "tiny-qwen3");
  EXPECT_EQ((*model)->config().n_vocab, 262);
  EXPECT_EQ((*model)->tokenizer().vocab().size(), 262);
  absl::StatusOr<std::unique_ptr<Model>> again = Model::Load(Checkpoint("tiny-qwen3") + "/");
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ((*again)->id(), "tiny-qwen3");
  EXPECT_EQ((*again)->fingerprint(), (*model)->fingerprint());
}

TEST(HfCheckpointTest, GemmaNormsGetTheirOne) {
  absl::StatusOr<HfCheckpoint> c = OpenHfCheckpoint(Checkpoint("tiny-gemma3"));
  ASSERT_TRUE(c.ok()) << c.status();
  absl::StatusOr<std::unique_ptr<SafetensorsFile>> st =
      SafetensorsFile::Open(Checkpoint("tiny-gemma3") + "/model.safetensors");
  ASSERT_TRUE(st.ok()) << st.status();
  const GgufTensorInfo* norm = c->file->FindTensor("blk.0.attn_norm.weight");
  ASSERT_NE(norm, nullptr);
  ASSERT_EQ(norm->dtype, kernels::DType::kF32);
  for (const SafetensorsTensor& t : (*st)->tensors()) {
    if (t.name != "model.layers.0.input_layernorm.weight") continue;
    ASSERT_EQ(t.dtype, kernels::DType::kF16);
    const float stored = static_cast<float>(reinterpret_cast<const _Float16*>(t.data)[3]);
    EXPECT_FLOAT_EQ(reinterpret_cast<const float*>(norm->data)[3], stored + 1.0f);
  }
  EXPECT_EQ(c->file->GetUint("gemma3.attention.sliding_window_pattern").value_or(0), 6u);
  EXPECT_EQ(c->file->GetFloat("gemma3.rope.freq_base_swa").value_or(0), 10000.0);
}

// Writes a safetensors file of `tensors` (name -> dtype, shape, bytes).
struct RawTensor {
  std::string name;
  std::string dtype;
  std::vector<int64_t> shape;
  std::string bytes;
};
void WriteSafetensors(const std::string& path, const std::vector<RawTensor>& tensors) {
  nlohmann::json header = nlohmann::json::object();
  std::string data;
  for (const RawTensor& t : tensors) {
    header[t.name] = {{"dtype", t.dtype},
                      {"shape", t.shape},
                      {"data_offsets", {data.size(), data.size() + t.bytes.size()}}};
    data += t.bytes;
  }
  const std::string text = header.dump();
  const uint64_t n = text.size();
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(&n), 8);
  out << text << data;
}

std::vector<RawTensor> ReadTensors(const std::string& path) {
  auto file = SafetensorsFile::Open(path);
  EXPECT_TRUE(file.ok()) << file.status();
  std::vector<RawTensor> out;
  for (const SafetensorsTensor& t : (*file)->tensors()) {
    const char* dtype = t.dtype == kernels::DType::kF32   ? "F32"
                        : t.dtype == kernels::DType::kF16 ? "F16"
                        : t.dtype == kernels::DType::kI8  ? "U8"
                                                          : "BF16";
    out.push_back(
        {t.name, dtype, t.shape, std::string(reinterpret_cast<const char*>(t.data), t.n_bytes)});
  }
  return out;
}

// A copy of a committed checkpoint in a temporary directory, config.json edited by `edit`.
std::string CopyCheckpoint(const std::string& shape, const std::string& name,
                           const std::function<void(nlohmann::json*)>& edit = nullptr) {
  const fs::path dir = test_support::TempPath(name);
  fs::remove_all(dir);
  fs::copy(Checkpoint(shape), dir);
  if (edit) {
    std::ifstream in(dir / "config.json");
    nlohmann::json config = nlohmann::json::parse(in);
    edit(&config);
    std::ofstream(dir / "config.json") << config.dump(2);
  }
  return dir.string();
}

// Llama 3's RoPE scaling becomes GGUF's rope_freqs.weight: each frequency's divisor, as
// transformers' llama3 rope computes it (its inv_freq against the unscaled one, computed with
// transformers 5.24 for this config: head 16, base 1e4, factor 8, low 1, high 4, context 8192).
TEST(HfCheckpointTest, Llama3RopeScalingBecomesFrequencyFactors) {
  const std::string dir = CopyCheckpoint("tiny", "llama3-rope", [](nlohmann::json* c) {
    (*c)["rope_parameters"] = {
        {"rope_type", "llama3"},   {"rope_theta", 10000.0},
        {"factor", 8.0},           {"low_freq_factor", 1.0},
        {"high_freq_factor", 4.0}, {"original_max_position_embeddings", 8192}};
  });
  absl::StatusOr<HfCheckpoint> c = OpenHfCheckpoint(dir);
  ASSERT_TRUE(c.ok()) << c.status();
  const GgufTensorInfo* freqs = c->file->FindTensor("rope_freqs.weight");
  ASSERT_NE(freqs, nullptr);
  const std::vector<float> expected = {1, 1, 1, 1, 1, 1, 4.681482f, 8};
  ASSERT_EQ(freqs->dims, std::vector<int64_t>{8});
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_NEAR(reinterpret_cast<const float*>(freqs->data)[i], expected[i], 1e-4) << i;
  }
  absl::StatusOr<std::unique_ptr<Model>> model = Model::Load(dir);
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_NE((*model)->weights().rope_freq_factors, nullptr);
}

TEST(HfCheckpointTest, ShardsGiveTheSameModel) {
  const std::string dir = CopyCheckpoint("tiny", "sharded");
  std::vector<RawTensor> tensors = ReadTensors(dir + "/model.safetensors");
  fs::remove(dir + "/model.safetensors");
  const size_t half = tensors.size() / 2;
  WriteSafetensors(dir + "/model-00001-of-00002.safetensors",
                   {tensors.begin(), tensors.begin() + half});
  WriteSafetensors(dir + "/model-00002-of-00002.safetensors",
                   {tensors.begin() + half, tensors.end()});
  nlohmann::json index = {{"metadata", {{"total_size", 0}}},
                          {"weight_map", nlohmann::json::object()}};
  for (size_t i = 0; i < tensors.size(); ++i) {
    index["weight_map"][tensors[i].name] =
        i < half ? "model-00001-of-00002.safetensors" : "model-00002-of-00002.safetensors";
  }
  std::ofstream(dir + "/model.safetensors.index.json") << index.dump();
  test_support::ExpectKlAgreement(dir, "tests/data/hf/tiny.transformers_c128.kld", 1e-4, 0.99,
                                  "tiny, 2 shards");

  fs::remove(dir + "/model-00002-of-00002.safetensors");
  const absl::Status missing = Model::Load(dir).status();
  EXPECT_EQ(missing.code(), absl::StatusCode::kNotFound) << missing;
  EXPECT_THAT(missing.message(), HasSubstr("model.safetensors.index.json"));
  EXPECT_THAT(missing.message(), HasSubstr("model-00002-of-00002.safetensors"));
}

// Round-to-nearest Q8_0 of the F32 tiny model: its matrices are Q8_0, and it scores against
// transformers' F32 log-probabilities as `baton make-model --shape tiny --type q8_0` does against
// llama.cpp's (measured: mean KLD 6.1e-4, same top 93.7% for both; a random model's flat
// distributions).
TEST(HfCheckpointTest, QuantizesAtLoad) {
  absl::StatusOr<HfCheckpoint> c =
      OpenHfCheckpoint(Checkpoint("tiny"), {.quantize = kernels::DType::kQ8_0});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->file->FindTensor("blk.0.ffn_up.weight")->dtype, kernels::DType::kQ8_0);
  EXPECT_EQ(c->file->FindTensor("blk.0.attn_norm.weight")->dtype, kernels::DType::kF32);
  absl::StatusOr<std::unique_ptr<Model>> q8 =
      Model::Load(Checkpoint("tiny"), {.quantize = kernels::DType::kQ8_0});
  absl::StatusOr<std::unique_ptr<Model>> f32 = Model::Load(Checkpoint("tiny"));
  ASSERT_TRUE(q8.ok()) << q8.status();
  ASSERT_TRUE(f32.ok()) << f32.status();
  EXPECT_NE((*q8)->fingerprint(), (*f32)->fingerprint());
  // The router loads without weights (nothing quantized), to the same fingerprint.
  absl::StatusOr<std::unique_ptr<Model>> described = Model::Load(
      Checkpoint("tiny"), {.quantize = kernels::DType::kQ8_0, .weights = false});
  ASSERT_TRUE(described.ok()) << described.status();
  EXPECT_EQ((*described)->fingerprint(), (*q8)->fingerprint());
  EXPECT_TRUE((*described)->weights().layers.empty());
  test_support::ExpectKlAgreement(Checkpoint("tiny"), "tests/data/hf/tiny.transformers_c128.kld",
                                  2e-3, 0.9, "tiny as Q8_0 vs transformers",
                                  {.quantize = kernels::DType::kQ8_0});
  EXPECT_THAT(Model::Load(test_support::DefaultModelPath(), {.quantize = kernels::DType::kQ8_0})
                  .status()
                  .message(),
              HasSubstr("Hugging Face checkpoint"));
}

TEST(HfCheckpointTest, ConfigErrorsNameTheField) {
  struct Case {
    std::string shape;
    std::function<void(nlohmann::json*)> edit;
    std::string expected;
  };
  const std::vector<Case> cases = {
      {"tiny", [](auto* c) { (*c)["architectures"] = {"PhiForCausalLM"}; },
       "config.json: architectures: [\"PhiForCausalLM\"] is not run"},
      {"tiny", [](auto* c) { c->erase("num_hidden_layers"); }, "num_hidden_layers: missing"},
      {"tiny", [](auto* c) { (*c)["hidden_size"] = -4; }, "hidden_size: must be a positive"},
      {"tiny", [](auto* c) { (*c)["rope_parameters"]["rope_type"] = "longrope"; },
       "rope type 'longrope' is not supported"},
      {"tiny", [](auto* c) { (*c)["rope_parameters"]["rope_theta"] = "big"; },
       "a field of an unexpected type"},
      {"tiny-gemma3", [](auto* c) { (*c)["query_pre_attn_scalar"] = 256; },
       "query_pre_attn_scalar: 256 differs"},
      {"tiny-qwen3moe", [](auto* c) { (*c)["norm_topk_prob"] = false; },
       "norm_topk_prob: false: baton's qwen3moe runs true"},
      {"tiny-qwen2moe", [](auto* c) { (*c)["mlp_only_layers"] = {1}; }, "mlp_only_layers"},
      {"tiny-gemma3", [](auto* c) { (*c)["final_logit_softcapping"] = 30.0; },
       "final_logit_softcapping"},
      {"tiny-gemma3", [](auto* c) { (*c)["layer_types"][0] = "full_attention"; }, "layer_types[1]"},
      {"tiny-gpt-oss", [](auto* c) { (*c)["swiglu_limit"] = 5.0; },
       "swiglu_limit: 5.0: baton's gpt-oss runs 7.0"},
      {"tiny-deepseek2",
       [](auto* c) {
         (*c)["topk_method"] = "group_limited_greedy";
         (*c)["n_group"] = 4;
         (*c)["topk_group"] = 2;
       },
       "topk_method: 'group_limited_greedy' with topk_group below n_group is not run"},
      {"tiny-deepseek2", [](auto* c) { (*c)["rope_parameters"]["mscale"] = 1.0; },
       "rope_scaling.mscale: DeepSeek's magnitude scale"},
      {"tiny-deepseek3", [](auto* c) { (*c)["v_head_dim"] = 16; },
       "tensor 'model.layers.0.self_attn.kv_b_proj.weight' [256, 32] is not "
       "[num_attention_heads * (qk_nope_head_dim + v_head_dim), kv_lora_rank] = [192, "},
      {"tiny", [](auto* c) { (*c)["quantization_config"] = {{"quant_method", "gptq"}}; },
       "quantization_config.quant_method: \"gptq\" is not run"},
      {"tiny", [](auto* c) { (*c)["num_hidden_layers"] = 1; },
       "is in layer 1, past config.json's 1 num_hidden_layers"},
      // The tensors say otherwise: the weights' check names the tensor and its file.
      {"tiny", [](auto* c) { (*c)["intermediate_size"] = 128; },
       "model.layers.0.mlp.gate_proj.weight in model.safetensors"},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    const std::string dir =
        CopyCheckpoint(cases[i].shape, absl::StrCat("bad-config-", i), cases[i].edit);
    const absl::Status s = Model::Load(dir).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_THAT(s.message(), HasSubstr(dir)) << i;
    EXPECT_THAT(s.message(), HasSubstr(cases[i].expected)) << s;
  }
}

// transformers 5's layout of a mixture's experts, mlp.experts.gate_up_proj [E, 2 * ff, hidden]
// (each expert's gate rows, then its up rows) and down_proj [E, hidden, ff], read as views: the
// same model as the experts one by one.
TEST(HfCheckpointTest, FusedExpertsGiveTheSameModel) {
  const std::string dir = CopyCheckpoint("tiny-qwen3moe", "fused-experts");
  std::vector<RawTensor> kept;
  std::map<std::string, RawTensor> experts;
  for (RawTensor& t : ReadTensors(dir + "/model.safetensors")) {
    if (t.name.find(".mlp.experts.") == std::string::npos) {
      kept.push_back(std::move(t));
    } else {
      experts[t.name] = std::move(t);
    }
  }
  const int64_t n_expert = 8, n_layer = 2;
  const std::vector<int64_t> gate_shape = experts["model.layers.0.mlp.experts.0.gate_proj.weight"].shape;
  const int64_t ff = gate_shape[0], hidden = gate_shape[1];
  for (int64_t l = 0; l < n_layer; ++l) {
    const std::string p = absl::StrCat("model.layers.", l, ".mlp.experts.");
    RawTensor gate_up{p + "gate_up_proj", "F32", {n_expert, 2 * ff, hidden}, ""};
    RawTensor down{p + "down_proj", "F32", {n_expert, hidden, ff}, ""};
    for (int64_t e = 0; e < n_expert; ++e) {
      const std::string q = absl::StrCat(p, e, ".");
      ASSERT_TRUE(experts.contains(q + "gate_proj.weight")) << q;
      gate_up.bytes += experts[q + "gate_proj.weight"].bytes + experts[q + "up_proj.weight"].bytes;
      down.bytes += experts[q + "down_proj.weight"].bytes;
    }
    kept.push_back(std::move(gate_up));
    kept.push_back(std::move(down));
  }
  WriteSafetensors(dir + "/model.safetensors", kept);
  absl::StatusOr<HfCheckpoint> c = OpenHfCheckpoint(dir);
  ASSERT_TRUE(c.ok()) << c.status();
  const GgufTensorInfo* down = c->file->FindTensor("blk.1.ffn_down_exps.weight");
  ASSERT_NE(down, nullptr);
  EXPECT_EQ(down->dims, (std::vector<int64_t>{ff, hidden, n_expert}));
  ASSERT_NE(c->file->FindTensor("blk.1.ffn_up_exps.7.weight"), nullptr);
  test_support::ExpectKlAgreement(dir, "tests/data/hf/tiny-qwen3moe.transformers_c128.kld", 1e-4,
                                  0.99, "tiny-qwen3moe, fused experts");
}

// The released gpt-oss models' YaRN leaves its ramp's ends where they fall (truncate: false),
// which baton runs as transformers does; llama.cpp's rule rounds them outward. Measured on the
// tiny model (head 32): mean KLD 1.7e-6 against transformers on that config, 0.061 against the
// rounded ramp's.
TEST(HfCheckpointTest, GptOssYarnRampUnroundedAsTransformers) {
  const std::string dir = CopyCheckpoint("tiny-gpt-oss", "gpt-oss-untruncated", [](auto* c) {
    (*c)["rope_parameters"]["truncate"] = false;
  });
  absl::StatusOr<HfCheckpoint> c = OpenHfCheckpoint(dir);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_FALSE(c->file->GetBool("gpt-oss.rope.scaling.yarn_truncate").value_or(true));
  test_support::ExpectKlAgreement(
      dir, "tests/data/hf/tiny-gpt-oss.untruncated.transformers_c128.kld", 1e-4, 0.99,
      "tiny-gpt-oss, truncate: false, vs transformers");
  absl::StatusOr<KlDivergenceSummary> rounded =
      test_support::ScoreKl(dir, "tests/data/hf/tiny-gpt-oss.transformers_c128.kld");
  ASSERT_TRUE(rounded.ok()) << rounded.status();
  EXPECT_GT(rounded->kld_mean, 1e-2);
}

// gpt-oss as OpenAI released it: the experts in MXFP4 (<proj>_blocks and _scales, rows [out, in],
// gate and up rows interleaved; make_hf_checkpoints.py's to_mxfp4), repacked into GGUF's MXFP4
// blocks. Every value is the one transformers' dequantization gives (E2M1 level times
// 2^(scale - 127)), and the model agrees with transformers' log-probabilities on the checkpoint
// (its MXFP4 reader). Measured: mean KLD 8.7e-4, same top 96%, from the MXFP4 kernels' Q8_0
// activations (as llama.cpp's); baton on the checkpoint dequantized to F32: 1e-6.
TEST(HfCheckpointTest, GptOssMxfp4AsReleased) {
  const std::string dir = Checkpoint("tiny-gpt-oss-mxfp4");
  absl::StatusOr<HfCheckpoint> c = OpenHfCheckpoint(dir);
  ASSERT_TRUE(c.ok()) << c.status();
  absl::StatusOr<std::unique_ptr<SafetensorsFile>> st =
      SafetensorsFile::Open(dir + "/model.safetensors");
  ASSERT_TRUE(st.ok()) << st.status();
  auto stored = [&](const std::string& name) -> const SafetensorsTensor& {
    for (const SafetensorsTensor& t : (*st)->tensors()) {
      if (t.name == name) return t;
    }
    ADD_FAILURE() << name;
    return (*st)->tensors().front();
  };
  static const float kE2M1[16] = {0, 0.5f, 1,  1.5f,  2,  3,  4,  6,
                                  0, -0.5f, -1, -1.5f, -2, -3, -4, -6};
  for (const auto& [proj, gguf_parts] :
       {std::pair<std::string, std::vector<std::string>>{"gate_up_proj",
                                                         {"ffn_gate_exps", "ffn_up_exps"}},
        {"down_proj", {"ffn_down_exps"}}}) {
    const std::string p = "model.layers.1.mlp.experts." + proj;
    const SafetensorsTensor& blocks = stored(p + "_blocks");
    const SafetensorsTensor& scales = stored(p + "_scales");
    const int64_t n = blocks.shape[0], rows = blocks.shape[1], groups = blocks.shape[2];
    const int64_t cols = groups * 32, parts = static_cast<int64_t>(gguf_parts.size());
    for (int64_t part = 0; part < parts; ++part) {
      const GgufTensorInfo* t = c->file->FindTensor("blk.1." + gguf_parts[part] + ".weight");
      ASSERT_NE(t, nullptr) << gguf_parts[part];
      ASSERT_EQ(t->dtype, kernels::DType::kMXFP4);
      ASSERT_EQ(t->dims, (std::vector<int64_t>{cols, rows / parts, n}));
      int64_t mismatches = 0;
      std::vector<float> row(cols);
      for (int64_t e = 0; e < n; ++e) {
        for (int64_t r = 0; r < rows / parts; ++r) {
          kernels::DequantizeRow(
              kernels::DType::kMXFP4,
              t->data + (e * rows / parts + r) * kernels::RowBytes(kernels::DType::kMXFP4, cols),
              row.data(), cols);
          const int64_t hf_row = e * rows + r * parts + part;
          for (int64_t col = 0; col < cols; ++col) {
            const int64_t g = hf_row * groups + col / 32;
            const uint8_t byte = blocks.data[g * 16 + col % 32 / 2];
            const float value =
                std::ldexp(kE2M1[col % 2 ? byte >> 4 : byte & 15], int{scales.data[g]} - 127);
            mismatches += row[col] != value;
          }
        }
      }
      EXPECT_EQ(mismatches, 0) << gguf_parts[part];
    }
  }
  test_support::ExpectKlAgreement(dir, "tests/data/hf/tiny-gpt-oss-mxfp4.transformers_c128.kld",
                                  3e-3, 0.9, "tiny-gpt-oss MXFP4 vs transformers");
}

TEST(HfCheckpointTest, FileErrorsNameTheFile) {
  // A tokenizer.json of a model type baton does not run.
  std::string dir = CopyCheckpoint("tiny", "unigram");
  {
    std::ifstream in(dir + "/tokenizer.json");
    nlohmann::json t = nlohmann::json::parse(in);
    t["model"]["type"] = "Unigram";
    std::ofstream(dir + "/tokenizer.json") << t.dump();
  }
  absl::Status s = Model::Load(dir).status();
  EXPECT_THAT(s.message(), HasSubstr(dir + "/tokenizer.json: model.type: 'Unigram'")) << s;

  // A token with no embedding row.
  dir = CopyCheckpoint("tiny", "extra-token");
  {
    std::ifstream in(dir + "/tokenizer.json");
    nlohmann::json t = nlohmann::json::parse(in);
    t["added_tokens"].push_back({{"id", 262}, {"content", "<mask>"}, {"special", true}});
    std::ofstream(dir + "/tokenizer.json") << t.dump();
  }
  s = Model::Load(dir).status();
  EXPECT_THAT(s.message(), HasSubstr("the tokenizer has 263 tokens but the model's embeddings "
                                     "only 262 rows (vocab_size)"))
      << s;

  // A tensor no rule maps, and a truncated shard.
  dir = CopyCheckpoint("tiny", "extra-tensor");
  std::vector<RawTensor> tensors = ReadTensors(dir + "/model.safetensors");
  tensors.push_back({"model.vision_tower.weight", "F32", {1}, std::string(4, '\0')});
  WriteSafetensors(dir + "/model.safetensors", tensors);
  s = Model::Load(dir).status();
  EXPECT_THAT(s.message(), HasSubstr("tensor 'model.vision_tower.weight' [1] is not part of")) << s;
  fs::resize_file(dir + "/model.safetensors", fs::file_size(dir + "/model.safetensors") - 8);
  s = Model::Load(dir).status();
  EXPECT_THAT(s.message(), HasSubstr("model.safetensors: tensor '")) << s;
  EXPECT_THAT(s.message(), HasSubstr("data_offsets")) << s;

  // A matrix of no values: the shape check names it, quantized or not.
  dir = CopyCheckpoint("tiny", "empty-matrix");
  tensors = ReadTensors(dir + "/model.safetensors");
  for (RawTensor& t : tensors) {
    if (t.name == "model.layers.0.mlp.up_proj.weight") t = {t.name, "F32", {0, 64}, ""};
  }
  WriteSafetensors(dir + "/model.safetensors", tensors);
  for (const LoadOptions& options : {LoadOptions{}, LoadOptions{.quantize = kernels::DType::kQ8_0}}) {
    s = Model::Load(dir, options).status();
    EXPECT_THAT(s.message(), HasSubstr("tensor 'blk.0.ffn_up.weight' has dims [64, 0]")) << s;
  }

  // MXFP4 blocks without their scales.
  dir = CopyCheckpoint("tiny-gpt-oss-mxfp4", "no-scales");
  tensors = ReadTensors(dir + "/model.safetensors");
  std::erase_if(tensors, [](const RawTensor& t) {
    return t.name == "model.layers.0.mlp.experts.down_proj_scales";
  });
  WriteSafetensors(dir + "/model.safetensors", tensors);
  s = Model::Load(dir).status();
  EXPECT_THAT(s.message(), HasSubstr("tensor 'model.layers.0.mlp.experts.down_proj_blocks' [4, "
                                     "64, 2, 16] has no model.layers.0.mlp.experts."
                                     "down_proj_scales beside it"))
      << s;

  dir = CopyCheckpoint("tiny", "no-weights");
  fs::remove(dir + "/model.safetensors");
  s = Model::Load(dir).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound) << s;
  EXPECT_THAT(s.message(), HasSubstr("neither model.safetensors nor")) << s;
}

TEST(SafetensorsFileTest, RejectsMalformedHeaders) {
  const std::string path = test_support::TempPath("bad.safetensors");
  auto open_with = [&](const std::string& bytes) {
    std::ofstream(path, std::ios::binary) << bytes;
    return SafetensorsFile::Open(path).status();
  };
  auto header = [](const std::string& json) {
    const uint64_t n = json.size();
    return std::string(reinterpret_cast<const char*>(&n), 8) + json;
  };
  EXPECT_THAT(open_with("abc").message(), HasSubstr("not a safetensors file"));
  EXPECT_THAT(open_with(std::string("\xff\xff\xff\xff\xff\xff\xff\x7f", 8) + "{}").message(),
              HasSubstr("not a safetensors file"));
  EXPECT_THAT(open_with(header("[1, 2]")).message(), HasSubstr("not a JSON object"));
  EXPECT_THAT(open_with(header(R"({"w": {"dtype": "I64", "shape": [1], "data_offsets": [0, 8]}})") +
                        std::string(8, '\0'))
                  .message(),
              HasSubstr("tensor 'w': dtype \"I64\" is not loaded"));
  EXPECT_THAT(
      open_with(header(R"({"w": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 20]}})") +
                std::string(20, '\0'))
          .message(),
      HasSubstr("do not hold 6 F32 values"));
  EXPECT_THAT(open_with(header(R"({"w": {"dtype": "F32", "shape": [4294967296, 4294967296],)"
                               R"( "data_offsets": [0, 0]}})"))
                  .message(),
              HasSubstr("shape overflows"));
  EXPECT_THAT(open_with(header(R"({"w": {"dtype": "F32", "shape": [2199023255552],)"
                               R"( "data_offsets": [0, 0]}})"))
                  .message(),
              HasSubstr("below 2^40"));
  const absl::Status ok =
      open_with(header(R"({"__metadata__": {"format": "pt"}, "w": {"dtype": "BF16", "shape": [2],)"
                       R"( "data_offsets": [0, 4]}})") +
                std::string(4, '\0'));
  EXPECT_TRUE(ok.ok()) << ok;
}

}  // namespace
}  // namespace baton::engine
