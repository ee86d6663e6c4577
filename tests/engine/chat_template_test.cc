// Chat templates rendered by llama.cpp's Jinja engine as transformers renders them. The expected
// strings were rendered from the real templates with Python's jinja2 under transformers' settings
// (SmolLM2-Instruct's from the default model file; Meta-Llama-3-8B-Instruct's; Gemma 3's); the
// whole corpus of llama.cpp's templates is compared byte for byte by
// tests/engine/chat_template_corpus_test.py.
#include "engine/chat_template.h"

#include <ctime>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "engine/chat_template_source.h"
#include "engine/gguf_file.h"
#include "engine/prompt_encoder.h"
#include "engine/vocab.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/test_paths.h"

namespace baton::engine {
namespace {

using Json = nlohmann::ordered_json;
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

// `source` compiled with `bos`, rendering `messages`; the error's text when it fails.
std::string Render(std::string_view source, const std::vector<ChatMessage>& messages,
                   bool add_generation_prompt, const std::string& bos = "") {
  absl::StatusOr<ChatTemplate> compiled = ChatTemplate::Compile(source, bos, "</s>");
  if (!compiled.ok()) return std::string(compiled.status().message());
  ChatTemplateInput input = TextChat(messages);
  input.add_generation_prompt = add_generation_prompt;
  absl::StatusOr<std::string> text = compiled->Render(input);
  return text.ok() ? *text : std::string(text.status().message());
}

std::string RenderJson(std::string_view source, const Json& messages, Json extra = Json::object(),
                       Json tools = nullptr, std::time_t now = 0) {
  absl::StatusOr<ChatTemplate> compiled = ChatTemplate::Compile(source, "<s>", "</s>");
  if (!compiled.ok()) return std::string(compiled.status().message());
  ChatTemplateInput input;
  input.messages = messages;
  input.extra = std::move(extra);
  input.tools = std::move(tools);
  input.add_generation_prompt = false;
  absl::StatusOr<std::string> text = compiled->Render(input, now);
  return text.ok() ? *text : std::string(text.status().message());
}

// Expected strings: Python's jinja2 (3.1, transformers' sandbox with trim_blocks and
// lstrip_blocks) rendering Gemma 3's template with bos_token "" and add_generation_prompt; the
// system message joins the first user turn untrimmed.
TEST(ChatTemplateTest, GemmaRendersAsJinjaDoes) {
  absl::StatusOr<std::string> gemma = ChatTemplateSource("gemma", "");
  ASSERT_TRUE(gemma.ok()) << gemma.status();
  EXPECT_EQ(Render(*gemma, {{"user", "Hi there"}}, true),
            "<start_of_turn>user\nHi there<end_of_turn>\n<start_of_turn>model\n");
  EXPECT_EQ(Render(*gemma,
                   {{"system", "You are terse. "},
                    {"user", "  What is 2+2?\n"},
                    {"assistant", "4"},
                    {"user", "And 3+3?"}},
                   true),
            "<start_of_turn>user\nYou are terse. \n\nWhat is 2+2?<end_of_turn>\n"
            "<start_of_turn>model\n4<end_of_turn>\n<start_of_turn>user\nAnd 3+3?<end_of_turn>\n"
            "<start_of_turn>model\n");
  // The template's own check that roles alternate, raised as its error.
  EXPECT_THAT(Render(*gemma, {{"user", "a"}, {"user", "b"}}, true),
              HasSubstr("Conversation roles must alternate"));
}

TEST(ChatTemplateTest, SmolLM2RendersItsDefaultSystemMessage) {
  const std::string smollm2 = SmolLM2Template();
  ASSERT_FALSE(smollm2.empty());
  EXPECT_EQ(Render(smollm2, kOneUser, true),
            "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
            "Face<|im_end|>\n<|im_start|>user\nHello!<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(Render(smollm2, kConversation, true),
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
            "<|im_start|>assistant\nHello.<|im_end|>\n<|im_start|>user\n  Bye \n<|im_end|>\n"
            "<|im_start|>assistant\n");
  EXPECT_EQ(Render(smollm2, kPadded, false),
            "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
            "Face<|im_end|>\n<|im_start|>user\n\xE3\x80\x80 x\xC2\xA0y \x1c<|im_end|>\n");
}

TEST(ChatTemplateTest, Llama3Renders) {
  EXPECT_EQ(Render(kLlama3Template, kOneUser, true, "<|begin_of_text|>"),
            "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHello!<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n");
  EXPECT_EQ(Render(kLlama3Template, kConversation, true),
            "<|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\nHello.<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nBye<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n");
  EXPECT_EQ(Render(kLlama3Template, kPadded, false),
            "<|start_header_id|>user<|end_header_id|>\n\nx\xC2\xA0y<|eot_id|>");
  EXPECT_EQ(Render(kLlama3Template, {{"user", " \n\t "}}, false),
            "<|start_header_id|>user<|end_header_id|>\n\n<|eot_id|>");
}

TEST(ChatTemplateTest, ParseErrorsNameTheTemplatesMistake) {
  absl::StatusOr<ChatTemplate> unclosed = ChatTemplate::Compile("{% for m in messages %}x", "", "");
  ASSERT_FALSE(unclosed.ok());
  EXPECT_EQ(unclosed.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(unclosed.status().message(), HasSubstr("chat template: does not parse"));
  EXPECT_FALSE(ChatTemplate::Compile("{{ messages[0]['content'] ", "", "").ok());
}

TEST(ChatTemplateTest, RaisedExceptionIsTheRenderError) {
  absl::StatusOr<ChatTemplate> t =
      ChatTemplate::Compile("{{ raise_exception('no tools here') }}", "", "");
  ASSERT_TRUE(t.ok()) << t.status();
  absl::StatusOr<std::string> text = t->Render(TextChat(kOneUser));
  EXPECT_EQ(text.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(text.status().message(), HasSubstr("no tools here"));
}

TEST(ChatTemplateTest, TojsonWritesAsPythonsJsonDumps) {
  const Json tools = Json::parse(
      R"([{"type": "function", "function": {"name": "get_weather", "description": "Météo",
           "parameters": {"type": "object", "required": ["city"]}}}])");
  // Keys in the client's order, non-ASCII kept, ", " and ": " separators.
  EXPECT_EQ(RenderJson("{{ tools[0] | tojson }}", Json::array(), Json::object(), tools),
            R"({"type": "function", "function": {"name": "get_weather", "description": "Météo", )"
            R"("parameters": {"type": "object", "required": ["city"]}}})");
  EXPECT_EQ(RenderJson("{{ tools[0].function.parameters | tojson(indent=2) }}", Json::array(),
                       Json::object(), tools),
            "{\n  \"type\": \"object\",\n  \"required\": [\n    \"city\"\n  ]\n}");
  EXPECT_EQ(RenderJson("{{ '<' | tojson }}{{ tools is none }}", Json::array()), "\"<\"True");
}

TEST(ChatTemplateTest, ExtraVariablesAndTheClock) {
  EXPECT_EQ(RenderJson("{{ enable_thinking }}|{{ bos_token }}{{ eos_token }}", Json::array(),
                       {{"enable_thinking", false}}),
            "False|<s></s>");
  // 2024-07-26 12:00 UTC; strftime_now formats local time, as Python's datetime.now() does.
  setenv("TZ", "UTC", 1);
  tzset();
  EXPECT_EQ(RenderJson("{{ strftime_now('%d %b %Y') }}", Json::array(), Json::object(), nullptr,
                       1721995200),
            "26 Jul 2024");
  absl::StatusOr<ChatTemplate> t = ChatTemplate::Compile("x", "", "");
  ASSERT_TRUE(t.ok());
  ChatTemplateInput input;
  input.extra = {{"messages", Json::array()}};
  EXPECT_THAT(t->Render(input).status().message(), HasSubstr("'messages' may not be set"));
}

TEST(ChatTemplateTest, ToolCallArgumentsSentAsJsonTextAreAnObject) {
  const Json messages = Json::parse(
      R"([{"role": "assistant", "tool_calls": [
           {"function": {"name": "f", "arguments": "{\"b\": 1, \"a\": [2]}"}},
           {"function": {"name": "g", "arguments": "not json"}},
           {"function": {"name": "h", "arguments": "[1]"}}]}])");
  EXPECT_EQ(RenderJson("{% for c in messages[0].tool_calls %}{{ c.function.arguments | tojson }};"
                       "{% endfor %}",
                       messages),
            R"({"b": 1, "a": [2]};"not json";"[1]";)");
}

TEST(ChatTemplateTest, InputNestedTooDeepIsRefused) {
  Json deep = Json::array();
  for (int i = 0; i < 1000; ++i) deep = Json::array({std::move(deep)});
  EXPECT_THAT(RenderJson("{{ messages | length }}", Json::array({{{"role", "user"}, {"x", deep}}})),
              HasSubstr("nest deeper than"));
  EXPECT_THAT(RenderJson("x", Json::array(), {{"deep", deep}}), HasSubstr("nest deeper than"));
  EXPECT_TRUE(JsonNestsWithin(Json::array({Json::array()}), 2));
  EXPECT_FALSE(JsonNestsWithin(Json::array({Json::array()}), 1));
  EXPECT_TRUE(JsonNestsWithin(3, 0));
  // Arguments nested too deep stay the text they came as.
  const std::string deep_text = std::string(40, '[') + std::string(40, ']');
  const Json calls = Json::array(
      {{{"role", "assistant"},
        {"tool_calls",
         Json::array({{{"function", {{"arguments", "{\"a\": " + deep_text + "}"}}}}})}}});
  EXPECT_EQ(RenderJson("{{ messages[0].tool_calls[0].function.arguments is string }}", calls),
            "True");
}

TEST(ChatTemplateTest, MessagesAsTransformersPassesThem) {
  // A null value is as if absent; reasoning is also given as "thinking" and "reasoning_content".
  const Json messages = Json::parse(
      R"([{"role": "assistant", "content": null, "reasoning": "hmm",
           "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": {"a": 1}}}]}])");
  EXPECT_EQ(RenderJson("{% for k in messages[0] %}{{ k }} {% endfor %}|{{ messages[0].thinking }}"
                       "|{{ messages[0].content is defined }}",
                       messages),
            "thinking role reasoning tool_calls reasoning_content |hmm|False");
}

}  // namespace
}  // namespace baton::engine
