// `baton make-model` as a user runs it: a shape and a type on the command line, a file the model
// loader takes, and the errors of bad flags.
#include <string>

#include "engine/gguf_file.h"
#include "engine/model.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/integration/local_cluster.h"
#include "tests/support/temp_path.h"

namespace baton {
namespace {

using testing::HasSubstr;

using test_support::CommandResult;
using test_support::RunBaton;

TEST(MakeModelCliTest, WritesAModelOfTheShapeAndTypeAsked) {
  const std::string path = test_support::TempPath("smollm2-q3k.gguf");
  const CommandResult made =
      RunBaton("make-model --shape smollm2-135m --layers 2 --vocab 1000 --type Q3_K --out " +
               path);
  ASSERT_EQ(made.exit_code, 0) << made.output;
  absl::StatusOr<std::unique_ptr<engine::GgufFile>> file = engine::GgufFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  // 1536-value rows take Q3_K; the 576-value ones fall back to Q4_0, as llama-quantize does.
  EXPECT_EQ((*file)->FindTensor("blk.0.ffn_down.weight")->dtype, kernels::DType::kQ3_K);
  EXPECT_EQ((*file)->FindTensor("blk.0.ffn_up.weight")->dtype, kernels::DType::kQ4_0);
  absl::StatusOr<std::unique_ptr<engine::Model>> model = engine::Model::Load(path);
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ((*model)->config().n_layer, 2);
  EXPECT_EQ((*model)->config().n_embd, 576);
  EXPECT_EQ((*model)->config().n_vocab, 1000);
}

TEST(MakeModelCliTest, WithoutFlagsWritesTheTinyF32Model) {
  const std::string path = test_support::TempPath("tiny.gguf");
  const CommandResult made = RunBaton("make-model --out " + path);
  ASSERT_EQ(made.exit_code, 0) << made.output;
  EXPECT_THAT(made.output, HasSubstr("wrote " + path));
  absl::StatusOr<std::unique_ptr<engine::Model>> model = engine::Model::Load(path);
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ((*model)->config().n_embd, 64);
  EXPECT_EQ((*model)->config().n_vocab, 262);  // the byte-level vocabulary, no fillers
  EXPECT_EQ((*model)->weights().layers[0].wq.dtype, kernels::DType::kF32);
}

TEST(MakeModelCliTest, BadFlagsSayWhatIsWrong) {
  const std::string path = test_support::TempPath("never.gguf");
  const CommandResult type = RunBaton("make-model --type q7_k --out " + path);
  EXPECT_EQ(type.exit_code, 2);
  EXPECT_THAT(type.output, HasSubstr("--type 'q7_k' is not one of"));
  const CommandResult shape = RunBaton("make-model --shape gpt-5 --out " + path);
  EXPECT_EQ(shape.exit_code, 2);
  EXPECT_THAT(shape.output, HasSubstr("no synthetic shape 'gpt-5'"));
  const CommandResult no_out = RunBaton("make-model --shape tiny");
  EXPECT_EQ(no_out.exit_code, 2);
  EXPECT_THAT(no_out.output, HasSubstr("--out is required"));
  const CommandResult vocab = RunBaton("make-model --vocab 12 --out " + path);
  EXPECT_EQ(vocab.exit_code, 2);
  EXPECT_THAT(vocab.output, HasSubstr("--vocab"));
}

}  // namespace
}  // namespace baton
