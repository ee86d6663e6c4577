// A GenerateRequest's chat as its template's input.
#include "router/chat_input.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace baton::router {
namespace {

using Json = nlohmann::ordered_json;

TEST(ChatInputTest, MessagesAsTemplatesExpectThem) {
  v1::ChatMessages chat;
  v1::ChatMessage* user = chat.add_messages();
  user->set_role("user");
  user->set_content("Weather?");
  v1::ChatMessage* assistant = chat.add_messages();
  assistant->set_role("assistant");
  assistant->set_reasoning_content("Call it.");
  v1::ToolCall* call = assistant->add_tool_calls();
  call->set_id("c1");
  call->set_name("get_weather");
  call->set_arguments(R"({"city": "Paris", "unit": "c"})");
  v1::ToolCall* bad = assistant->add_tool_calls();
  bad->set_name("f");
  bad->set_arguments("not json");
  v1::ChatMessage* tool = chat.add_messages();
  tool->set_role("tool");
  tool->set_tool_call_id("c1");
  tool->set_name("get_weather");
  tool->set_content("21 C");
  chat.set_template_kwargs(R"({"enable_thinking": false})");

  absl::StatusOr<engine::ChatTemplateInput> input = ChatInput(chat);
  ASSERT_TRUE(input.ok()) << input.status();
  EXPECT_EQ(input->messages.dump(),
            R"([{"role":"user","content":"Weather?"},)"
            R"({"role":"assistant","tool_calls":[{"id":"c1","type":"function","function":)"
            R"({"name":"get_weather","arguments":"{\"city\": \"Paris\", \"unit\": \"c\"}"}},)"
            R"({"id":"","type":"function","function":{"name":"f","arguments":"not json"}}],)"
            R"("reasoning_content":"Call it."},)"
            R"({"role":"tool","content":"21 C","tool_call_id":"c1","name":"get_weather"}])");
  EXPECT_EQ(input->extra, Json({{"enable_thinking", false}}));
  EXPECT_TRUE(input->tools.is_null());
  EXPECT_TRUE(input->add_generation_prompt);
  chat.set_add_generation_prompt(false);
  EXPECT_FALSE(ChatInput(chat)->add_generation_prompt);
}

TEST(ChatInputTest, TemplateKwargsMustBeAnObject) {
  v1::ChatMessages chat;
  chat.set_template_kwargs("[1]");
  EXPECT_EQ(ChatInput(chat).status().code(), absl::StatusCode::kInvalidArgument);
  chat.set_template_kwargs("{");
  EXPECT_EQ(ChatInput(chat).status().code(), absl::StatusCode::kInvalidArgument);
  // A gRPC client's 100,000 levels: refused without walking them.
  chat.set_template_kwargs("{\"a\": " + std::string(100000, '[') + std::string(100000, ']') + "}");
  EXPECT_THAT(ChatInput(chat).status().message(), ::testing::HasSubstr("nests deeper than"));
}

}  // namespace
}  // namespace baton::router
