// Chat templates: detection from the model's Jinja source and rendering. The expected strings were
// rendered from the real templates with Jinja2 (SmolLM2-Instruct's from the default model file;
// Meta-Llama-3-8B-Instruct's, with bos_token = "<|begin_of_text|>", which baton adds as BOS).
#include "engine/chat_template.h"

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "engine/gguf_file.h"
#include "engine/tokenizer.h"
#include "engine/vocab.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/status_matchers.h"
#include "tests/support/test_paths.h"

namespace baton::engine {
namespace {

using test_support::IsOkAndHolds;
using ::testing::HasSubstr;

constexpr char kLlama3Template[] =
    "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = "
    "'<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] | "
    "trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% "
    "endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}{{ "
    "'<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}";

std::string SmolLM2Template() {
  absl::StatusOr<std::unique_ptr<GgufFile>> file = GgufFile::Open(test_support::DefaultModelPath());
  if (!file.ok()) return "";
  absl::StatusOr<Vocab> vocab = LoadVocab(**file);
  return vocab.ok() ? vocab->chat_template : "";
}

const std::vector<ChatMessage> kOneUser = {{"user", "Hello!"}};
const std::vector<ChatMessage> kConversation = {
    {"system", "Be brief."}, {"user", "Hi"}, {"assistant", "Hello."}, {"user", "  Bye \n"}};
// U+3000 and U+00A0 are Unicode spaces, \x1c a separator: Python's strip() removes all three.
const std::vector<ChatMessage> kPadded = {{"user", "\xE3\x80\x80 x\xC2\xA0y \x1c"}};

TEST(ChatTemplateTest, DetectsSmolLM2) {
  const std::string jinja = SmolLM2Template();
  ASSERT_FALSE(jinja.empty());
  absl::StatusOr<ChatTemplateKind> kind = DetectChatTemplate(jinja);
  ASSERT_TRUE(kind.ok()) << kind.status();
  EXPECT_EQ(*kind, ChatTemplateKind::kChatML);
  EXPECT_EQ(ChatTemplateDefaultSystem(jinja), kSmolLM2DefaultSystemPrompt);
}

TEST(ChatTemplateTest, DetectsLlama3) {
  absl::StatusOr<ChatTemplateKind> kind = DetectChatTemplate(kLlama3Template);
  ASSERT_TRUE(kind.ok()) << kind.status();
  EXPECT_EQ(*kind, ChatTemplateKind::kLlama3);
  EXPECT_EQ(ChatTemplateDefaultSystem(kLlama3Template), "");
}

TEST(ChatTemplateTest, UnknownOrMissingTemplateIsAnError) {
  absl::StatusOr<ChatTemplateKind> empty = DetectChatTemplate("");
  EXPECT_EQ(empty.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(empty.status().message(), HasSubstr("no chat template"));
  EXPECT_THAT(empty.status().message(), HasSubstr("chatml, llama3 or gemma"));
  absl::StatusOr<ChatTemplateKind> other =
      DetectChatTemplate("{% for m in messages %}[INST] {{ m['content'] }} [/INST]{% endfor %}");
  EXPECT_EQ(other.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(other.status().message(), HasSubstr("unsupported chat template"));
}

TEST(ChatTemplateTest, Names) {
  EXPECT_THAT(ParseChatTemplateName("chatml"), IsOkAndHolds(ChatTemplateKind::kChatML));
  EXPECT_THAT(ParseChatTemplateName("llama3"), IsOkAndHolds(ChatTemplateKind::kLlama3));
  EXPECT_EQ(ParseChatTemplateName("vicuna").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(ParseChatTemplateName("").status().message(), HasSubstr("chatml, llama3, gemma"));
  EXPECT_THAT(ParseChatTemplateName("gemma"), IsOkAndHolds(ChatTemplateKind::kGemma));
  EXPECT_EQ(ChatTemplateName(ChatTemplateKind::kChatML), "chatml");
  EXPECT_EQ(ChatTemplateName(ChatTemplateKind::kLlama3), "llama3");
  EXPECT_EQ(ChatTemplateName(ChatTemplateKind::kGemma), "gemma");
}

// Expected strings: Python's jinja2 (3.1, transformers' sandbox with trim_blocks and
// lstrip_blocks) rendering tests/data/chat_templates/gemma3.jinja (Gemma 3's template, as
// google/gemma-3-*-it's tokenizer_config.json has it) with bos_token "" and
// add_generation_prompt; the system message joins the first user turn untrimmed.
TEST(ChatTemplateTest, GemmaRendersAsJinjaDoes) {
  absl::StatusOr<ChatTemplateKind> kind = DetectChatTemplate(
      "{{ bos_token }}{{ '<start_of_turn>' + role + '\\n' }}");
  ASSERT_TRUE(kind.ok()) << kind.status();
  EXPECT_EQ(*kind, ChatTemplateKind::kGemma);
  EXPECT_EQ(ApplyChatTemplate(ChatTemplateKind::kGemma, {{"user", "Hi there"}}, true),
            "<start_of_turn>user\nHi there<end_of_turn>\n<start_of_turn>model\n");
  EXPECT_EQ(ApplyChatTemplate(ChatTemplateKind::kGemma,
                              {{"system", "You are terse. "},
                               {"user", "  What is 2+2?\n"},
                               {"assistant", "4"},
                               {"user", "And 3+3?"}},
                              true),
            "<start_of_turn>user\nYou are terse. \n\nWhat is 2+2?<end_of_turn>\n"
            "<start_of_turn>model\n4<end_of_turn>\n<start_of_turn>user\nAnd 3+3?<end_of_turn>\n"
            "<start_of_turn>model\n");
}

TEST(ChatTemplateTest, ChatMLAsSmolLM2Renders) {
  EXPECT_EQ(ApplyChatTemplate(ChatTemplateKind::kChatML, kOneUser, true),
            "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
            "Face<|im_end|>\n<|im_start|>user\nHello!<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(ApplyChatTemplate(ChatTemplateKind::kChatML, kConversation, true),
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
            "<|im_start|>assistant\nHello.<|im_end|>\n<|im_start|>user\n  Bye \n<|im_end|>\n"
            "<|im_start|>assistant\n");
  EXPECT_EQ(ApplyChatTemplate(ChatTemplateKind::kChatML, kPadded, false),
            "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
            "Face<|im_end|>\n<|im_start|>user\n\xE3\x80\x80 x\xC2\xA0y \x1c<|im_end|>\n");
  EXPECT_EQ(ApplyChatTemplate(ChatTemplateKind::kChatML, {}, true), "<|im_start|>assistant\n");
}

TEST(ChatTemplateTest, ChatMLDefaultSystemIsAParameter) {
  EXPECT_EQ(ApplyChatTemplate(ChatTemplateKind::kChatML, kOneUser, true, ""),
            "<|im_start|>user\nHello!<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(ApplyChatTemplate(ChatTemplateKind::kChatML, kOneUser, false, "Be nice."),
            "<|im_start|>system\nBe nice.<|im_end|>\n<|im_start|>user\nHello!<|im_end|>\n");
  const std::string escaped =
      "{{ '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud.<|im_end|>\\n' }}";
  EXPECT_EQ(ChatTemplateDefaultSystem(escaped), "You are Qwen, created by Alibaba Cloud.");
}

TEST(ChatTemplateTest, Llama3Renders) {
  // The template's "<|begin_of_text|>" is the BOS token: not part of the text.
  EXPECT_EQ(ApplyChatTemplate(ChatTemplateKind::kLlama3, kOneUser, true),
            "<|start_header_id|>user<|end_header_id|>\n\nHello!<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n");
  EXPECT_EQ(ApplyChatTemplate(ChatTemplateKind::kLlama3, kConversation, true),
            "<|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\nHello.<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nBye<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n");
  EXPECT_EQ(ApplyChatTemplate(ChatTemplateKind::kLlama3, kPadded, false),
            "<|start_header_id|>user<|end_header_id|>\n\nx\xC2\xA0y<|eot_id|>");
  EXPECT_EQ(ApplyChatTemplate(ChatTemplateKind::kLlama3, {{"user", " \n\t "}}, false),
            "<|start_header_id|>user<|end_header_id|>\n\n<|eot_id|>");
}

TEST(ChatTemplateTest, RenderedChatMLEncodesWithSpecialTokens) {
  absl::StatusOr<std::unique_ptr<GgufFile>> file = GgufFile::Open(test_support::DefaultModelPath());
  ASSERT_TRUE(file.ok()) << file.status();
  absl::StatusOr<Vocab> vocab = LoadVocab(**file);
  ASSERT_TRUE(vocab.ok()) << vocab.status();
  absl::StatusOr<std::unique_ptr<Tokenizer>> t = Tokenizer::Create(std::move(*vocab));
  ASSERT_TRUE(t.ok()) << t.status();
  const std::string prompt = ApplyChatTemplate(ChatTemplateKind::kChatML, kOneUser, true);
  const std::vector<TokenId> ids = (*t)->Encode(prompt, {.parse_special = true});
  ASSERT_FALSE(ids.empty());
  EXPECT_EQ(ids.front(), 1);  // <|im_start|>
  EXPECT_EQ(std::count(ids.begin(), ids.end(), 1), 3);
  EXPECT_EQ(std::count(ids.begin(), ids.end(), 2), 2);  // <|im_end|>
  EXPECT_EQ((*t)->Decode(ids, /*render_special=*/true), prompt);
}

}  // namespace
}  // namespace baton::engine
