#include "router/chat_input.h"

#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace baton::router {
namespace {

using Json = nlohmann::ordered_json;

Json Message(const v1::ChatMessage& m) {
  Json message = {{"role", m.role()}};
  if (!m.content().empty() || m.tool_calls().empty()) message["content"] = m.content();
  if (!m.tool_calls().empty()) {
    Json calls = Json::array();
    for (const v1::ToolCall& call : m.tool_calls()) {
      calls.push_back({{"id", call.id()},
                       {"type", "function"},
                       {"function", {{"name", call.name()}, {"arguments", call.arguments()}}}});
    }
    message["tool_calls"] = std::move(calls);
  }
  if (!m.tool_call_id().empty()) message["tool_call_id"] = m.tool_call_id();
  if (!m.name().empty()) message["name"] = m.name();
  if (!m.reasoning_content().empty()) message["reasoning_content"] = m.reasoning_content();
  return message;
}

// A JSON field of the chat (`field`): an object, or an array when not `object`, nested within
// the template input's depth.
absl::StatusOr<Json> ChatJson(const std::string& text, const char* field, bool object) {
  Json value = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (object ? !value.is_object() : !value.is_array()) {
    return absl::InvalidArgumentError(
        absl::StrCat("chat ", field, " is not a JSON ", object ? "object" : "array"));
  }
  if (!engine::JsonNestsWithin(value, engine::kMaxChatInputDepth)) {
    return absl::InvalidArgumentError(absl::StrCat("chat ", field, " nests deeper than ",
                                                   engine::kMaxChatInputDepth, " levels"));
  }
  return value;
}

}  // namespace

absl::StatusOr<engine::ChatTemplateInput> ChatInput(const v1::ChatMessages& chat) {
  engine::ChatTemplateInput input;
  for (const v1::ChatMessage& m : chat.messages()) input.messages.push_back(Message(m));
  input.add_generation_prompt = !chat.has_add_generation_prompt() || chat.add_generation_prompt();
  if (!chat.template_kwargs().empty()) {
    absl::StatusOr<Json> extra = ChatJson(chat.template_kwargs(), "template_kwargs", true);
    if (!extra.ok()) return extra.status();
    input.extra = *std::move(extra);
  }
  if (!chat.tools().empty()) {
    absl::StatusOr<Json> tools = ChatJson(chat.tools(), "tools", false);
    if (!tools.ok()) return tools.status();
    input.tools = *std::move(tools);
  }
  return input;
}

}  // namespace baton::router
