// The synthetic model writer: named shapes, the weight types and mixes it writes (read back by
// the GGUF reader and the model loader), the vocabulary padding, and its errors.
#include "engine/synthetic_model.h"

#include <string>

#include "engine/gguf_file.h"
#include "engine/model.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/dtype.h"
#include "tests/support/temp_path.h"

namespace baton::engine {
namespace {

using kernels::DType;
using testing::HasSubstr;

TEST(SyntheticShapeTest, NamesTheShapesOfRealModels) {
  absl::StatusOr<SyntheticModelOptions> qwen = SyntheticShape("qwen2-0.5b");
  ASSERT_TRUE(qwen.ok()) << qwen.status();
  EXPECT_EQ(qwen->architecture, "qwen2");
  EXPECT_EQ(qwen->n_layer, 24);
  EXPECT_EQ(qwen->n_embd, 896);
  EXPECT_EQ(qwen->n_vocab, 151936);
  absl::StatusOr<SyntheticModelOptions> llama = SyntheticShape("llama-3-8b");
  ASSERT_TRUE(llama.ok()) << llama.status();
  EXPECT_EQ(llama->n_embd, 4096);
  EXPECT_EQ(llama->n_head_kv, 8);
  EXPECT_EQ(llama->n_ff, 14336);
  EXPECT_FALSE(llama->tied_output);
  for (const char* name : {"tiny", "smollm2-135m", "llama-3.2-1b"}) {
    EXPECT_TRUE(SyntheticShape(name).ok()) << name;
  }
  const absl::Status unknown = SyntheticShape("gpt-5").status();
  EXPECT_EQ(unknown.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(unknown.message()), HasSubstr("qwen2-0.5b"));
}

TEST(SyntheticTensorTypeTest, Q4KMGivesMoreBitsToValuesAndDownProjectionsAndFallsBack) {
  SyntheticModelOptions o;
  o.mix = SyntheticMix::kQ4_K_M;
  EXPECT_EQ(SyntheticTensorType(o, "blk.0.attn_q.weight", 2048), DType::kQ4_K);
  EXPECT_EQ(SyntheticTensorType(o, "blk.7.attn_v.weight", 2048), DType::kQ6_K);
  EXPECT_EQ(SyntheticTensorType(o, "blk.7.ffn_down.weight", 8192), DType::kQ6_K);
  EXPECT_EQ(SyntheticTensorType(o, "output.weight", 2048), DType::kQ6_K);
  EXPECT_EQ(SyntheticTensorType(o, "token_embd.weight", 2048), DType::kQ4_K);
  // Rows of 896 do not fit super-blocks of 256.
  EXPECT_EQ(SyntheticTensorType(o, "blk.0.attn_q.weight", 896), DType::kQ5_0);
  EXPECT_EQ(SyntheticTensorType(o, "blk.0.attn_v.weight", 896), DType::kQ8_0);
  o.mix = SyntheticMix::kUniform;
  o.weight_dtype = DType::kQ3_K;
  EXPECT_EQ(SyntheticTensorType(o, "blk.0.ffn_up.weight", 512), DType::kQ3_K);
  EXPECT_EQ(SyntheticTensorType(o, "blk.0.ffn_up.weight", 96), DType::kQ4_0);
  // Rows of 48 (tiny-deepseek3's Q bottleneck) fit no 32-value block: F16.
  o.weight_dtype = DType::kQ8_0;
  EXPECT_EQ(SyntheticTensorType(o, "blk.0.attn_q_b.weight", 48), DType::kF16);
}

TEST(WriteSyntheticModelTest, WritesTheMixAndThePaddedVocabularyForTheLoader) {
  const std::string path = test_support::TempPath("mix.gguf");
  SyntheticModelOptions o;
  o.n_embd = 256;
  o.n_ff = 512;
  o.n_vocab = 1000;
  o.mix = SyntheticMix::kQ4_K_M;
  o.tied_output = false;
  ASSERT_TRUE(WriteSyntheticModel(path, o).ok());
  absl::StatusOr<std::unique_ptr<GgufFile>> file = GgufFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ((*file)->FindTensor("blk.1.attn_k.weight")->dtype, DType::kQ4_K);
  EXPECT_EQ((*file)->FindTensor("blk.1.ffn_down.weight")->dtype, DType::kQ6_K);
  EXPECT_EQ((*file)->FindTensor("output.weight")->dtype, DType::kQ6_K);
  EXPECT_EQ((*file)->FindTensor("output_norm.weight")->dtype, DType::kF32);
  absl::StatusOr<std::unique_ptr<Model>> model = Model::Load(path);
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ((*model)->config().n_vocab, 1000);
}

TEST(WriteSyntheticModelTest, RejectsOptionsNoModelCanHave) {
  const std::string path = test_support::TempPath("bad.gguf");
  SyntheticModelOptions no_encoder;
  no_encoder.weight_dtype = DType::kQ8_1;
  SyntheticModelOptions heads;
  heads.n_head = 3;  // 64 / 3
  SyntheticModelOptions vocab;
  vocab.n_vocab = 100;
  SyntheticModelOptions architecture;
  architecture.architecture = "mamba";
  for (const SyntheticModelOptions& o : {no_encoder, heads, vocab, architecture}) {
    const absl::Status s = WriteSyntheticModel(path, o);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_THAT(std::string(s.message()), HasSubstr("synthetic model"));
  }
}

}  // namespace
}  // namespace baton::engine
