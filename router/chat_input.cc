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

}  // namespace

absl::StatusOr<engine::ChatTemplateInput> ChatInput(const v1::ChatMessages& chat) {
  engine::ChatTemplateInput input;
  for (const v1::ChatMessage& m : chat.messages()) input.messages.push_back(Message(m));
  input.add_generation_prompt = !chat.has_add_generation_prompt() || chat.add_generation_prompt();
  if (!chat.template_kwargs().empty()) {
    input.extra = Json::parse(chat.template_kwargs(), nullptr, /*allow_exceptions=*/false);
    if (!input.extra.is_object()) {
      return absl::InvalidArgumentError("chat template_kwargs is not a JSON object");
    }
    if (!engine::JsonNestsWithin(input.extra, engine::kMaxChatInputDepth)) {
      return absl::InvalidArgumentError(absl::StrCat("chat template_kwargs nests deeper than ",
                                                     engine::kMaxChatInputDepth, " levels"));
    }
  }
  if (!chat.tools().empty()) {
    input.tools = Json::parse(chat.tools(), nullptr, /*allow_exceptions=*/false);
    if (!input.tools.is_array()) {
      return absl::InvalidArgumentError("chat tools is not a JSON array");
    }
    if (!engine::JsonNestsWithin(input.tools, engine::kMaxChatInputDepth)) {
      return absl::InvalidArgumentError(absl::StrCat("chat tools nest deeper than ",
                                                     engine::kMaxChatInputDepth, " levels"));
    }
  }
  return input;
}

}  // namespace baton::router
