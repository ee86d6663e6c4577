// Chats to prompt tokens: the model's own template, BOS added once, and the errors that name
// the message or the template at fault.
#include "engine/prompt_encoder.h"

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "engine/chat_template_source.h"
#include "engine/model.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/test_paths.h"

namespace baton::engine {
namespace {

using Json = nlohmann::ordered_json;
using ::testing::HasSubstr;

std::unique_ptr<Model> Load(const std::string& path) {
  absl::StatusOr<std::unique_ptr<Model>> model = Model::Load(path);
  EXPECT_TRUE(model.ok()) << model.status();
  return model.ok() ? std::move(*model) : nullptr;
}

TEST(PromptEncoderTest, SmolLM2ChatIsItsTemplatesRenderingEncoded) {
  std::unique_ptr<Model> model = Load(test_support::DefaultModelPath());
  ASSERT_NE(model, nullptr);
  const Tokenizer& tokenizer = model->tokenizer();
  PromptEncoder encoder(&tokenizer, tokenizer.vocab().chat_template);
  absl::StatusOr<std::vector<TokenId>> ids = encoder.EncodeChat(TextChat({{"user", "Hello!"}}));
  ASSERT_TRUE(ids.ok()) << ids.status();
  EXPECT_EQ(ids->front(), 1);  // <|im_start|>: SmolLM2 adds no BOS
  EXPECT_EQ(std::count(ids->begin(), ids->end(), 1), 3);
  EXPECT_EQ(std::count(ids->begin(), ids->end(), 2), 2);  // <|im_end|>
  EXPECT_EQ(tokenizer.Decode(*ids, /*render_special=*/true),
            "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
            "Face<|im_end|>\n<|im_start|>user\nHello!<|im_end|>\n<|im_start|>assistant\n");
}

// Gemma's template writes {{ bos_token }} and its tokenizer adds BOS: the prompt has one.
TEST(PromptEncoderTest, BosIsAddedOnce) {
  std::unique_ptr<Model> model = Load(test_support::SourcePath("models/gemma-3-270m-q4_k_m.gguf"));
  ASSERT_NE(model, nullptr);
  const Tokenizer& tokenizer = model->tokenizer();
  ASSERT_TRUE(tokenizer.vocab().add_bos);
  const TokenId bos = tokenizer.vocab().bos_id;
  PromptEncoder encoder(&tokenizer, ChatTemplateSource("gemma", tokenizer.vocab().chat_template));
  absl::StatusOr<std::string> text = encoder.RenderChat(TextChat({{"user", "Hi"}}));
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(*text, "<start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\n");
  absl::StatusOr<std::vector<TokenId>> ids = encoder.EncodeChat(TextChat({{"user", "Hi"}}));
  ASSERT_TRUE(ids.ok()) << ids.status();
  EXPECT_EQ(ids->front(), bos);
  EXPECT_EQ(std::count(ids->begin(), ids->end(), bos), 1);
}

TEST(PromptEncoderTest, ErrorsNameTheMessageOrTheTemplate) {
  std::unique_ptr<Model> model = Load(test_support::DefaultModelPath());
  ASSERT_NE(model, nullptr);
  PromptEncoder encoder(&model->tokenizer(), std::string("{{ raise_exception('roles!') }}"));
  EXPECT_THAT(encoder.EncodeChat(TextChat({{"user", "Hi"}})).status().message(),
              HasSubstr("roles!"));
  EXPECT_THAT(encoder.EncodeChat(TextChat({})).status().message(), HasSubstr("no messages"));
  EXPECT_THAT(encoder.EncodeChat(TextChat({{"user", "Hi"}, {"", "x"}})).status().message(),
              HasSubstr("chat message 1 has no role"));
  EXPECT_THAT(encoder.EncodeChat(TextChat({{"user", ""}})).status().message(),
              HasSubstr("chat message 0 (user) has no content"));
  EXPECT_THAT(encoder.EncodeChat(TextChat({{"user", "\xff"}})).status().message(),
              HasSubstr("chat message 0 is not valid UTF-8"));
  ChatTemplateInput not_object;
  not_object.messages = Json::array({"hello"});
  EXPECT_THAT(encoder.EncodeChat(not_object).status().message(), HasSubstr("not an object"));

  // A template that does not parse refuses chats with its error; text prompts still encode.
  PromptEncoder broken(&model->tokenizer(), std::string("{% for %}"));
  EXPECT_THAT(broken.EncodeChat(TextChat({{"user", "Hi"}})).status().message(),
              HasSubstr("chat template: does not parse"));
  EXPECT_TRUE(broken.EncodeText("Hi").ok());
  PromptEncoder none(&model->tokenizer(), ChatTemplateSource("", ""));
  absl::Status no_template = none.EncodeChat(TextChat({{"user", "Hi"}})).status();
  EXPECT_EQ(no_template.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(no_template.message(), HasSubstr("the model has no chat template"));
}

}  // namespace
}  // namespace baton::engine
