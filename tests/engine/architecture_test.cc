// The architecture registry and what each architecture makes of a file's metadata (the layer
// specs the Transformer runs), and the errors for files baton cannot run: an unknown
// architecture, metadata that disagrees with the tensors, a missing tensor of a block.
#include "engine/architecture.h"

#include <cmath>
#include <map>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "engine/gguf_file.h"
#include "engine/gguf_value.h"
#include "engine/gguf_writer.h"
#include "engine/model.h"
#include "engine/synthetic_model.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/temp_path.h"

namespace baton::engine {
namespace {

using testing::AllOf;
using testing::HasSubstr;

std::string WriteShape(const std::string& shape, const std::string& file_name) {
  absl::StatusOr<SyntheticModelOptions> options = SyntheticShape(shape);
  EXPECT_TRUE(options.ok()) << options.status();
  const std::string path = test_support::TempPath(file_name);
  EXPECT_TRUE(WriteSyntheticModel(path, *options).ok());
  return path;
}

using Metadata = std::map<std::string, GgufValue>;

GgufValue U32(uint32_t v) { return GgufValue::Uint(GgufValueType::kUint32, v); }
GgufValue F32(float v) { return GgufValue::Float(GgufValueType::kFloat32, v); }

// A copy of the GGUF file at `from` with the metadata keys of `set` set (replaced or added) and
// without the tensor `drop`.
std::string Rewrite(const std::string& from, const std::string& file_name, const Metadata& set,
                    const std::string& drop = "") {
  absl::StatusOr<std::unique_ptr<GgufFile>> file = GgufFile::Open(from);
  EXPECT_TRUE(file.ok()) << file.status();
  GgufWriter w;
  for (const auto& [key, value] : (*file)->metadata()) {
    if (!set.contains(key)) w.Add(key, value);
  }
  for (const auto& [key, value] : set) w.Add(key, value);
  for (const GgufTensorInfo& t : (*file)->tensors()) {
    if (t.name == drop) continue;
    const std::string_view bytes(reinterpret_cast<const char*>(t.data), t.n_bytes);
    EXPECT_TRUE(w.AddTensor(t.name, t.dtype, t.dims, bytes).ok());
  }
  const std::string path = test_support::TempPath(file_name);
  EXPECT_TRUE(w.WriteFile(path).ok());
  return path;
}

absl::Status LoadStatus(const std::string& path) { return Model::Load(path).status(); }

TEST(ArchitectureRegistryTest, FindsEachArchitectureByItsName) {
  for (const char* name :
       {"llama", "qwen2", "qwen3", "gemma3", "qwen2moe", "qwen3moe", "gpt-oss", "deepseek2"}) {
    const Architecture* a = FindArchitecture(name);
    ASSERT_NE(a, nullptr) << name;
    EXPECT_EQ(a->name, name);
  }
  EXPECT_EQ(FindArchitecture("mamba"), nullptr);
  EXPECT_EQ(ArchitectureNames(),
            "deepseek2, gemma3, gpt-oss, llama, qwen2, qwen2moe, qwen3, qwen3moe");
}

TEST(ArchitectureSpecTest, Qwen3NormsEveryHeadWithTheFilesHeadSize) {
  absl::StatusOr<std::unique_ptr<Model>> model =
      Model::Load(WriteShape("tiny-qwen3", "spec-qwen3.gguf"));
  ASSERT_TRUE(model.ok()) << model.status();
  const ModelConfig& c = (*model)->config();
  EXPECT_EQ(c.head_dim, 32);  // key_length, not n_embd / n_head = 16
  EXPECT_TRUE(c.rope_neox);
  ASSERT_EQ(c.layers.size(), 2u);
  for (const LayerSpec& l : c.layers) {
    EXPECT_TRUE(l.attention.qk_norm);
    EXPECT_FALSE(l.attention.qkv_bias);
    EXPECT_FALSE(l.attention.post_norm);
    EXPECT_EQ(l.attention.window, 0);
    EXPECT_FLOAT_EQ(l.attention.kq_scale, 1.0f / std::sqrt(32.0f));
  }
  EXPECT_NE((*model)->weights().layers[1].k_norm, nullptr);
}

TEST(ArchitectureSpecTest, Gemma3InterleavesLocalLayersWithAGlobalOne) {
  absl::StatusOr<std::unique_ptr<Model>> model =
      Model::Load(WriteShape("tiny-gemma3", "spec-gemma3.gguf"));
  ASSERT_TRUE(model.ok()) << model.status();
  const ModelConfig& c = (*model)->config();
  EXPECT_FLOAT_EQ(c.embedding_scale, 8.0f);  // sqrt(64)
  ASSERT_EQ(c.layers.size(), 6u);
  for (int l = 0; l < 6; ++l) {
    const AttentionSpec& a = c.layers[l].attention;
    const bool global = l == 5;
    EXPECT_EQ(a.window, global ? 0 : 32) << "layer " << l;
    EXPECT_TRUE(a.qk_norm && a.post_norm);
    EXPECT_FLOAT_EQ(a.query_scale, 1.0f / std::sqrt(32.0f));
    EXPECT_FLOAT_EQ(a.kq_scale, 1.0f);
    EXPECT_EQ(c.layers[l].feed_forward.activation, FeedForwardActivation::kGeluGated);
    EXPECT_TRUE(c.layers[l].feed_forward.post_norm);
  }
  // Real Gemma 3 files give global layers a base of 1e6, local ones 1e4 (or freq_base_swa).
  const std::string path =
      Rewrite(WriteShape("tiny-gemma3", "spec-gemma3-base.gguf"), "spec-gemma3-rebased.gguf",
              {{"gemma3.rope.freq_base", F32(1e6f)}, {"gemma3.rope.freq_base_swa", F32(2e4f)}});
  absl::StatusOr<std::unique_ptr<Model>> rebased = Model::Load(path);
  ASSERT_TRUE(rebased.ok()) << rebased.status();
  EXPECT_FLOAT_EQ((*rebased)->config().layers[0].attention.rope_freq_base, 2e4f);
  EXPECT_FLOAT_EQ((*rebased)->config().layers[5].attention.rope_freq_base, 1e6f);
}

// Gemma 3 27B's 62 layers scale Q by 1/sqrt(n_embd / n_head), as llama.cpp does.
TEST(ArchitectureSpecTest, GptOssAlternatesLocalAndGlobalLayersWithSinksBiasesAndYarn) {
  absl::StatusOr<std::unique_ptr<Model>> model =
      Model::Load(WriteShape("tiny-gpt-oss", "spec-gpt-oss.gguf"));
  ASSERT_TRUE(model.ok()) << model.status();
  const ModelConfig& c = (*model)->config();
  EXPECT_TRUE(c.rope_neox);
  EXPECT_FLOAT_EQ(c.rope_freq_scale, 0.25f);
  EXPECT_FLOAT_EQ(c.rope_yarn.ext_factor, 1.0f);
  EXPECT_EQ(c.rope_yarn.n_ctx_orig, 64);
  EXPECT_EQ(c.ffn_norm_tensor, "post_attention_norm");
  ASSERT_EQ(c.layers.size(), 4u);
  for (int l = 0; l < 4; ++l) {
    const LayerSpec& spec = c.layers[l];
    EXPECT_EQ(spec.attention.window, l % 2 == 0 ? 24 : 0) << "layer " << l;
    EXPECT_TRUE(spec.attention.qkv_bias && spec.attention.output_bias && spec.attention.sinks);
    EXPECT_FALSE(spec.attention.qk_norm || spec.attention.post_norm);
    EXPECT_FLOAT_EQ(spec.attention.kq_scale, 1.0f / std::sqrt(32.0f));
    EXPECT_EQ(spec.feed_forward.activation, FeedForwardActivation::kSwigluOai);
    EXPECT_EQ(spec.feed_forward.experts.count, 4);
    EXPECT_EQ(spec.feed_forward.experts.used, 2);
    EXPECT_TRUE(spec.feed_forward.experts.normalize_weights && spec.feed_forward.experts.biases);
    const LayerWeights& w = (*model)->weights().layers[l];
    EXPECT_NE(w.attn_sinks, nullptr);
    EXPECT_NE(w.bo, nullptr);
    EXPECT_NE(w.router_bias, nullptr);
    EXPECT_NE(w.experts_down_bias, nullptr);
  }
  // A file without its window, and one without a layer's sinks.
  const std::string path = WriteShape("tiny-gpt-oss", "err-gpt-oss.gguf");
  absl::StatusOr<std::unique_ptr<GgufFile>> file = GgufFile::Open(path);
  ASSERT_TRUE(file.ok());
  GgufWriter w;
  for (const auto& [key, value] : (*file)->metadata()) {
    if (key != "gpt-oss.attention.sliding_window") w.Add(key, value);
  }
  const std::string no_window = test_support::TempPath("err-gpt-oss-window.gguf");
  ASSERT_TRUE(w.WriteFile(no_window).ok());
  EXPECT_THAT(LoadStatus(no_window).message(),
              AllOf(HasSubstr(no_window), HasSubstr("gpt-oss.attention.sliding_window")));
  const std::string no_sinks =
      Rewrite(path, "err-gpt-oss-sinks.gguf", {}, "blk.1.attn_sinks.weight");
  EXPECT_THAT(LoadStatus(no_sinks).message(),
              AllOf(HasSubstr(no_sinks), HasSubstr("blk.1.attn_sinks.weight")));
  const std::string no_bias =
      Rewrite(path, "err-gpt-oss-bias.gguf", {}, "blk.2.ffn_down_exps.bias");
  EXPECT_THAT(LoadStatus(no_bias).message(),
              AllOf(HasSubstr(no_bias), HasSubstr("blk.2.ffn_down_exps.bias")));
  // DeepSeek's YaRN magnitude scale is refused by name.
  const std::string log_mul = Rewrite(path, "err-gpt-oss-yarn.gguf",
                                      {{"gpt-oss.rope.scaling.yarn_log_multiplier", F32(0.1f)}});
  EXPECT_THAT(LoadStatus(log_mul).message(),
              AllOf(HasSubstr(log_mul), HasSubstr("yarn_log_multiplier")));
}

// llama.cpp's deepseek2 reading: the latent attention's dims, YaRN's magnitude scale in the
// scores' scale (mscale = 1 + 0.1 * 0.707 * ln 4, squared, over sqrt(32 + 16)) and none in the
// RoPE (attn_factor cancelling its 1 + 0.1 ln 4), a dense first layer, then routed and ungated
// shared experts; V3's routing (sigmoid, selection bias, groups, renormalized and scaled).
TEST(ArchitectureSpecTest, Deepseek2ReadsLatentAttentionAndItsExperts) {
  absl::StatusOr<std::unique_ptr<Model>> v2 =
      Model::Load(WriteShape("tiny-deepseek2", "spec-deepseek2.gguf"));
  ASSERT_TRUE(v2.ok()) << v2.status();
  const ModelConfig& c = (*v2)->config();
  EXPECT_FALSE(c.rope_neox);
  EXPECT_EQ(c.n_head_kv, 1);
  EXPECT_EQ(c.head_dim, 48);
  EXPECT_EQ(c.rope_n_dims, 16);
  const float mscale = 1.0f + 0.1f * 0.707f * std::log(4.0f);
  EXPECT_NEAR(c.rope_yarn.attn_factor * (1.0f + 0.1f * std::log(4.0f)), 1.0f, 1e-6);
  ASSERT_EQ(c.layers.size(), 3u);
  for (int l = 0; l < 3; ++l) {
    const LayerSpec& spec = c.layers[l];
    EXPECT_EQ(spec.attention.latent.kv_rank, 32);
    EXPECT_EQ(spec.attention.latent.q_rank, 0);
    EXPECT_EQ(spec.attention.latent.nope_dim, 32);
    EXPECT_EQ(spec.attention.latent.value_dim, 32);
    EXPECT_NEAR(spec.attention.kq_scale, mscale * mscale / std::sqrt(48.0f), 1e-6);
    const ExpertsSpec& e = spec.feed_forward.experts;
    EXPECT_EQ(e.count, l == 0 ? 0 : 8) << "layer " << l;
    if (l == 0) continue;
    EXPECT_EQ(e.used, 2);
    EXPECT_EQ(e.n_ff_shared, 64);  // two shared experts of 32
    EXPECT_FALSE(e.shared_gate || e.normalize_weights || e.selection_bias);
    EXPECT_EQ(e.gating, ExpertGating::kSoftmax);
    EXPECT_EQ((*v2)->weights().layers[l].wk_b.size(), 4u);
  }

  absl::StatusOr<std::unique_ptr<Model>> v3 =
      Model::Load(WriteShape("tiny-deepseek3", "spec-deepseek3.gguf"));
  ASSERT_TRUE(v3.ok()) << v3.status();
  const LayerSpec& spec = (*v3)->config().layers[2];
  EXPECT_EQ(spec.attention.latent.q_rank, 48);
  EXPECT_FLOAT_EQ(spec.attention.kq_scale, 1.0f / std::sqrt(48.0f));
  const ExpertsSpec& e = spec.feed_forward.experts;
  EXPECT_EQ(e.gating, ExpertGating::kSigmoid);
  EXPECT_TRUE(e.selection_bias && e.normalize_weights);
  EXPECT_FLOAT_EQ(e.weights_scale, 2.5f);
  EXPECT_EQ(e.groups, 4);
  EXPECT_EQ(e.groups_used, 2);
  EXPECT_NE((*v3)->weights().layers[2].selection_bias, nullptr);
}

TEST(ArchitectureErrorsTest, Deepseek2FilesThatCannotRunNameTheKeyOrTensor) {
  const std::string path = WriteShape("tiny-deepseek2", "err-deepseek2.gguf");
  // A file from before llama.cpp's latent-attention layout.
  absl::StatusOr<std::unique_ptr<GgufFile>> file = GgufFile::Open(path);
  ASSERT_TRUE(file.ok());
  GgufWriter w;
  for (const auto& [key, value] : (*file)->metadata()) {
    if (key != "deepseek2.attention.key_length_mla") w.Add(key, value);
  }
  const std::string old = test_support::TempPath("err-deepseek2-old.gguf");
  ASSERT_TRUE(w.WriteFile(old).ok());
  EXPECT_THAT(LoadStatus(old).message(),
              AllOf(HasSubstr(old), HasSubstr("key_length_mla"), HasSubstr("attn_kv_b")));
  const std::string kv_heads =
      Rewrite(path, "err-deepseek2-kv.gguf", {{"deepseek2.attention.head_count_kv", U32(2)}});
  EXPECT_THAT(LoadStatus(kv_heads).message(),
              AllOf(HasSubstr(kv_heads), HasSubstr("head_count_kv 2")));
  const std::string groups =
      Rewrite(path, "err-deepseek2-groups.gguf", {{"deepseek2.expert_group_count", U32(3)}});
  EXPECT_THAT(LoadStatus(groups).message(),
              AllOf(HasSubstr(groups), HasSubstr("expert_group_count 3")));
  const std::string no_k_b = Rewrite(path, "err-deepseek2-kb.gguf", {}, "blk.1.attn_k_b.weight");
  EXPECT_THAT(LoadStatus(no_k_b).message(),
              AllOf(HasSubstr(no_k_b), HasSubstr("blk.1.attn_k_b.weight")));
  const std::string no_shared =
      Rewrite(path, "err-deepseek2-shexp.gguf", {}, "blk.2.ffn_up_shexp.weight");
  EXPECT_THAT(LoadStatus(no_shared).message(),
              AllOf(HasSubstr(no_shared), HasSubstr("blk.2.ffn_up_shexp.weight")));
  const std::string dense =
      Rewrite(path, "err-deepseek2-dense.gguf",
              {{"deepseek2.leading_dense_block_count", GgufValue::String("one")}});
  EXPECT_THAT(LoadStatus(dense).message(),
              AllOf(HasSubstr(dense), HasSubstr("deepseek2.leading_dense_block_count")));
  const std::string temperature = Rewrite(path, "err-deepseek2-temperature.gguf",
                                          {{"deepseek2.attention.temperature_scale", F32(0.1f)}});
  EXPECT_THAT(LoadStatus(temperature).message(),
              AllOf(HasSubstr(temperature), HasSubstr("attention.temperature_scale")));
  // A multi-token-prediction block after the trunk is not run: the model has one layer less.
  const std::string nextn =
      Rewrite(path, "spec-deepseek2-nextn.gguf", {{"deepseek2.nextn_predict_layers", U32(1)}});
  absl::StatusOr<std::unique_ptr<Model>> trunk = Model::Load(nextn);
  ASSERT_TRUE(trunk.ok()) << trunk.status();
  EXPECT_EQ((*trunk)->config().n_layer, 2);
  EXPECT_EQ((*trunk)->weights().layers.size(), 2u);
}

TEST(ArchitectureSpecTest, Gemma3With62LayersScalesQueriesByTheEmbeddingPerHead) {
  absl::StatusOr<SyntheticModelOptions> o = SyntheticShape("tiny-gemma3");
  ASSERT_TRUE(o.ok());
  o->n_layer = 62;
  const std::string path = test_support::TempPath("spec-gemma3-62.gguf");
  ASSERT_TRUE(WriteSyntheticModel(path, *o).ok());
  absl::StatusOr<std::unique_ptr<Model>> model = Model::Load(path);
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_FLOAT_EQ((*model)->config().layers[0].attention.query_scale, 0.25f);  // 1/sqrt(64/4)
}

TEST(ArchitectureSpecTest, ALlamaFileWithASlidingWindowAttendsInItOnEveryLayer) {
  SyntheticModelOptions o;
  o.sliding_window = 7;
  const std::string path = test_support::TempPath("spec-mistral.gguf");
  ASSERT_TRUE(WriteSyntheticModel(path, o).ok());
  absl::StatusOr<std::unique_ptr<Model>> model = Model::Load(path);
  ASSERT_TRUE(model.ok()) << model.status();
  for (const LayerSpec& l : (*model)->config().layers) EXPECT_EQ(l.attention.window, 7);
}

TEST(ArchitectureErrorsTest, AnUnknownArchitectureNamesTheFileAndTheOnesBatonRuns) {
  const std::string path = Rewrite(WriteShape("tiny", "err-base.gguf"), "err-mamba.gguf",
                                   {{"general.architecture", GgufValue::String("mamba")}});
  EXPECT_THAT(std::string(LoadStatus(path).message()),
              AllOf(HasSubstr(path), HasSubstr("unsupported architecture 'mamba'"),
                    HasSubstr("general.architecture"),
                    HasSubstr("deepseek2, gemma3, gpt-oss, llama, qwen2, qwen2moe, qwen3, "
                              "qwen3moe")));
}

TEST(ArchitectureErrorsTest, MetadataThatDisagreesWithTheTensorsNamesTheTensorOrKey) {
  const std::string qwen3 = WriteShape("tiny-qwen3", "err-qwen3.gguf");
  const std::string head =
      Rewrite(qwen3, "err-qwen3-head.gguf",
              {{"qwen3.attention.key_length", U32(16)}, {"qwen3.attention.value_length", U32(16)}});
  EXPECT_THAT(std::string(LoadStatus(head).message()),
              AllOf(HasSubstr(head), HasSubstr("blk.0.attn_q.weight"), HasSubstr("dims")));
  const std::string value =
      Rewrite(qwen3, "err-qwen3-value.gguf", {{"qwen3.attention.value_length", U32(64)}});
  EXPECT_THAT(std::string(LoadStatus(value).message()),
              AllOf(HasSubstr(value), HasSubstr("qwen3.attention.value_length 64")));
  const std::string window =
      Rewrite(WriteShape("tiny-gemma3", "err-gemma3.gguf"), "err-gemma3-window.gguf",
              {{"gemma3.attention.sliding_window", GgufValue::String("wide")}});
  EXPECT_THAT(std::string(LoadStatus(window).message()),
              AllOf(HasSubstr(window), HasSubstr("gemma3.attention.sliding_window")));
}

TEST(ArchitectureSpecTest, MixturesOfExpertsReadTheirCountsAndWeighting) {
  absl::StatusOr<std::unique_ptr<Model>> qwen3moe =
      Model::Load(WriteShape("tiny-qwen3moe", "spec-qwen3moe.gguf"));
  ASSERT_TRUE(qwen3moe.ok()) << qwen3moe.status();
  const ExpertsSpec& e = (*qwen3moe)->config().layers[1].feed_forward.experts;
  EXPECT_EQ(e.count, 8);
  EXPECT_EQ(e.used, 2);
  EXPECT_EQ(e.n_ff, 64);
  EXPECT_TRUE(e.normalize_weights);
  EXPECT_EQ(e.n_ff_shared, 0);
  EXPECT_TRUE((*qwen3moe)->config().layers[1].attention.qk_norm);
  EXPECT_EQ((*qwen3moe)->weights().layers[1].experts.size(), 8u);
  EXPECT_EQ((*qwen3moe)->weights().layers[1].w_gate.data, nullptr);  // no dense FFN

  absl::StatusOr<std::unique_ptr<Model>> qwen2moe =
      Model::Load(WriteShape("tiny-qwen2moe", "spec-qwen2moe.gguf"));
  ASSERT_TRUE(qwen2moe.ok()) << qwen2moe.status();
  const ExpertsSpec& shared = (*qwen2moe)->config().layers[0].feed_forward.experts;
  EXPECT_FALSE(shared.normalize_weights);
  EXPECT_EQ(shared.n_ff_shared, 128);
  EXPECT_TRUE((*qwen2moe)->config().layers[0].attention.qkv_bias);
  EXPECT_EQ((*qwen2moe)->weights().layers[0].shared_expert_gate.n_rows, 1);
  EXPECT_EQ((*qwen2moe)->weights().layers[0].w_gate.n_rows, 128);

  absl::StatusOr<std::unique_ptr<Model>> mixtral =
      Model::Load(WriteShape("tiny-mixtral", "spec-mixtral.gguf"));
  ASSERT_TRUE(mixtral.ok()) << mixtral.status();
  EXPECT_EQ((*mixtral)->config().layers[0].feed_forward.experts.count, 4);
  EXPECT_EQ((*mixtral)->config().layers[0].feed_forward.experts.n_ff, 96);  // feed_forward_length
}

TEST(ArchitectureErrorsTest, ExpertCountsThatDisagreeWithTheTensorsOrEachOther) {
  const std::string qwen3moe = WriteShape("tiny-qwen3moe", "err-qwen3moe.gguf");
  const std::string count =
      Rewrite(qwen3moe, "err-qwen3moe-count.gguf", {{"qwen3moe.expert_count", U32(6)}});
  EXPECT_THAT(std::string(LoadStatus(count).message()),
              AllOf(HasSubstr(count), HasSubstr("blk.0.ffn_gate_inp.weight"), HasSubstr("dims")));
  const std::string used =
      Rewrite(qwen3moe, "err-qwen3moe-used.gguf", {{"qwen3moe.expert_used_count", U32(9)}});
  EXPECT_THAT(std::string(LoadStatus(used).message()),
              AllOf(HasSubstr(used), HasSubstr("qwen3moe.expert_used_count 9 exceeds")));
  const std::string missing =
      Rewrite(qwen3moe, "err-qwen3moe-missing.gguf", {}, "blk.1.ffn_down_exps.weight");
  EXPECT_THAT(std::string(LoadStatus(missing).message()),
              AllOf(HasSubstr(missing), HasSubstr("missing tensor 'blk.1.ffn_down_exps.weight'")));
}

TEST(ArchitectureErrorsTest, AMissingTensorOfABlockNamesTheFileAndTheTensor) {
  const std::string path = Rewrite(WriteShape("tiny-gemma3", "err-gemma3-full.gguf"),
                                   "err-gemma3-missing.gguf", {}, "blk.3.post_ffw_norm.weight");
  EXPECT_THAT(std::string(LoadStatus(path).message()),
              AllOf(HasSubstr(path), HasSubstr("missing tensor 'blk.3.post_ffw_norm.weight'")));
}

}  // namespace
}  // namespace baton::engine
