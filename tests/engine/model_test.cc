// Model::Load: the loaded model keeps what the engine needs (tensors, config, tokenizer) and lets
// the file's parsed metadata go, its vocabulary arrays the largest part of it.
#include "engine/model.h"

#include <memory>
#include <string>
#include <vector>

#include "engine/synthetic_model.h"
#include "gtest/gtest.h"
#include "tests/support/temp_path.h"

namespace baton::engine {
namespace {

TEST(ModelLoadTest, ReleasesTheParsedMetadataAndKeepsTensorsAndTokenizer) {
  const std::string path = test_support::TempPath("model.gguf");
  SyntheticModelOptions o;
  o.n_vocab = 300;
  ASSERT_TRUE(WriteSyntheticModel(path, o).ok());
  absl::StatusOr<std::unique_ptr<Model>> model = Model::Load(path);
  ASSERT_TRUE(model.ok()) << model.status();
  const Model& m = **model;

  EXPECT_TRUE(m.file().metadata().empty());
  EXPECT_EQ(m.file().Find("tokenizer.ggml.tokens"), nullptr);
  EXPECT_NE(m.file().FindTensor("token_embd.weight"), nullptr);
  EXPECT_EQ(m.config().n_vocab, 300);
  EXPECT_FALSE(m.fingerprint().empty());

  // The writer's merges are "Ġ t", "h e", "Ġt he", "i n", "a n" (tokens 256..260 after the 256
  // byte tokens): the ranks, which view into the vocabulary's merge strings, still merge.
  EXPECT_EQ(m.tokenizer().Encode(" the", {}), std::vector<TokenId>({258}));
  EXPECT_EQ(m.tokenizer().Encode(" an", {}), std::vector<TokenId>({32, 260}));
  EXPECT_EQ(m.tokenizer().Decode({258, 32, 260}), " the an");
}

}  // namespace
}  // namespace baton::engine
