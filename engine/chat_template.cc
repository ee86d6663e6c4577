#include "engine/chat_template.h"

#include <array>
#include <exception>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "engine/unicode.h"
// llama.cpp's Jinja engine (third_party/llama-jinja/common/jinja).
#include "jinja/lexer.h"
#include "jinja/parser.h"
#include "jinja/runtime.h"
#include "jinja/value.h"

namespace baton::engine {

struct ChatTemplate::Compiled {
  std::string source;
  std::string bos_token;
  std::string eos_token;
  jinja::program program;
};

namespace {

// The names a message's reasoning comes under, the first the one templates read (transformers'
// _REASONING_FIELDS).
constexpr std::array<std::string_view, 3> kReasoningFields = {"reasoning_content", "thinking",
                                                              "reasoning"};

jinja::value ToJinja(const nlohmann::ordered_json& json) {
  switch (json.type()) {
    case nlohmann::ordered_json::value_t::null:
    case nlohmann::ordered_json::value_t::discarded:
      return jinja::mk_val<jinja::value_none>();
    case nlohmann::ordered_json::value_t::boolean:
      return jinja::mk_val<jinja::value_bool>(json.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer:
    case nlohmann::ordered_json::value_t::number_unsigned:
      return jinja::mk_val<jinja::value_int>(json.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_float:
      return jinja::mk_val<jinja::value_float>(json.get<double>());
    case nlohmann::ordered_json::value_t::string:
      return jinja::mk_val<jinja::value_string>(json.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      jinja::value_array array = jinja::mk_val<jinja::value_array>();
      for (const nlohmann::ordered_json& item : json) array->push_back(ToJinja(item));
      return array;
    }
    case nlohmann::ordered_json::value_t::object:
    case nlohmann::ordered_json::value_t::binary:
      break;
  }
  jinja::value_object object = jinja::mk_val<jinja::value_object>();
  if (json.is_object()) {
    for (const auto& [key, item] : json.items()) object->insert(key, ToJinja(item));
  }
  return object;
}

// Tool calls with their arguments as an object where they came as JSON text of one (that nests
// no deeper than the input may).
nlohmann::ordered_json ToolCallsWithObjectArguments(nlohmann::ordered_json calls) {
  if (!calls.is_array()) return calls;
  for (nlohmann::ordered_json& call : calls) {
    if (!call.is_object() || !call.contains("function") || !call["function"].is_object()) continue;
    nlohmann::ordered_json& function = call["function"];
    auto arguments = function.find("arguments");
    if (arguments == function.end() || !arguments->is_string()) continue;
    nlohmann::ordered_json parsed = nlohmann::ordered_json::parse(
        arguments->get_ref<const std::string&>(), nullptr, /*allow_exceptions=*/false);
    if (parsed.is_object() && JsonNestsWithin(parsed, kMaxChatInputDepth)) {
      *arguments = std::move(parsed);
    }
  }
  return calls;
}

// A message as transformers hands it to the template: keys whose value is null dropped (OpenAI's
// clients send content: null beside tool_calls); where it has reasoning, that reasoning under
// "thinking" (first, unless the message has its own) and "reasoning_content" too. Tool calls'
// arguments as ToolCallsWithObjectArguments gives them.
nlohmann::ordered_json TemplateMessage(const nlohmann::ordered_json& message) {
  if (!message.is_object()) return message;
  nlohmann::ordered_json present = nlohmann::ordered_json::object();
  for (const auto& [key, value] : message.items()) {
    if (value.is_null()) continue;
    present[key] = key == "tool_calls" ? ToolCallsWithObjectArguments(value) : value;
  }
  for (std::string_view field : kReasoningFields) {
    auto it = present.find(std::string(field));
    if (it == present.end()) continue;
    nlohmann::ordered_json out = {{"thinking", *it}};
    for (const auto& [key, value] : present.items()) out[key] = value;
    out["reasoning_content"] = *it;
    return out;
  }
  return present;
}

// Every string in `value` (keys too) is valid UTF-8. `value` nests within kMaxChatInputDepth.
bool AllValidUtf8(const nlohmann::ordered_json& value) {
  if (value.is_string()) return unicode::IsValidUtf8(value.get_ref<const std::string&>());
  if (value.is_structured()) {
    for (const auto& [key, item] : value.items()) {
      if (!unicode::IsValidUtf8(key) || !AllValidUtf8(item)) return false;
    }
  }
  return true;
}

// The input's shapes, depth (checked before anything recursive walks it), UTF-8 and the
// variables the request may not set.
absl::Status CheckInput(const ChatTemplateInput& input) {
  if (!input.messages.is_array()) return absl::InvalidArgumentError("messages is not a list");
  if (!input.extra.is_object()) {
    return absl::InvalidArgumentError("chat template arguments are not an object");
  }
  for (const nlohmann::ordered_json* part : {&input.messages, &input.tools, &input.extra}) {
    if (!JsonNestsWithin(*part, kMaxChatInputDepth)) {
      return absl::InvalidArgumentError(
          absl::StrCat("the chat's messages, tools or template arguments nest deeper than ",
                       kMaxChatInputDepth, " levels"));
    }
  }
  for (size_t i = 0; i < input.messages.size(); ++i) {
    if (!AllValidUtf8(input.messages[i])) {
      return absl::InvalidArgumentError(absl::StrCat("chat message ", i, " is not valid UTF-8"));
    }
  }
  if (!AllValidUtf8(input.tools) || !AllValidUtf8(input.extra)) {
    return absl::InvalidArgumentError("chat tools or template arguments are not valid UTF-8");
  }
  for (const char* reserved : {"messages", "tools", "documents", "add_generation_prompt"}) {
    if (input.extra.contains(reserved)) {
      return absl::InvalidArgumentError(
          absl::StrCat("chat template argument '", reserved, "' may not be set by the request"));
    }
  }
  return absl::OkStatus();
}

absl::Status TemplateError(const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat("chat template: ", what));
}

}  // namespace

bool JsonNestsWithin(const nlohmann::ordered_json& json, int levels) {
  if (!json.is_structured()) return true;
  if (levels <= 0) return false;
  for (const nlohmann::ordered_json& item : json) {
    if (!JsonNestsWithin(item, levels - 1)) return false;
  }
  return true;
}

absl::StatusOr<ChatTemplateInput> ChatTemplateInput::FromRequest(
    const nlohmann::ordered_json& request) {
  if (!request.is_object()) return absl::InvalidArgumentError("the request is not an object");
  ChatTemplateInput input;
  auto messages = request.find("messages");
  if (messages == request.end() || !messages->is_array()) {
    return absl::InvalidArgumentError("'messages' must be a list");
  }
  input.messages = *messages;
  if (auto tools = request.find("tools"); tools != request.end() && !tools->is_null()) {
    if (!tools->is_array()) return absl::InvalidArgumentError("'tools' must be a list");
    input.tools = *tools;
  }
  if (auto add = request.find("add_generation_prompt"); add != request.end()) {
    if (!add->is_boolean()) {
      return absl::InvalidArgumentError("'add_generation_prompt' must be true or false");
    }
    input.add_generation_prompt = add->get<bool>();
  }
  if (auto extra = request.find("chat_template_kwargs");
      extra != request.end() && !extra->is_null()) {
    if (!extra->is_object()) {
      return absl::InvalidArgumentError("'chat_template_kwargs' must be an object");
    }
    input.extra = *extra;
  }
  return input;
}

absl::StatusOr<ChatTemplate> ChatTemplate::Compile(std::string_view source, std::string bos_token,
                                                   std::string eos_token) {
  auto compiled = std::make_shared<Compiled>();
  compiled->bos_token = std::move(bos_token);
  compiled->eos_token = std::move(eos_token);
  try {
    jinja::lexer lexer;
    jinja::lexer_result tokens = lexer.tokenize(std::string(source));
    compiled->program = jinja::parse_from_tokens(tokens);
    compiled->source = std::move(tokens.source);
  } catch (const std::exception& e) {
    return TemplateError(absl::StrCat("does not parse: ", e.what()));
  }
  return ChatTemplate(std::move(compiled));
}

absl::StatusOr<std::string> ChatTemplate::Render(const ChatTemplateInput& input,
                                                 std::time_t now) const {
  if (absl::Status checked = CheckInput(input); !checked.ok()) return checked;
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  for (const nlohmann::ordered_json& message : input.messages) {
    messages.push_back(TemplateMessage(message));
  }
  try {
    jinja::context context(compiled_->source);
    context.current_time = now;
    // transformers passes the special tokens first and the caller's arguments over them.
    context.set_val("bos_token", jinja::mk_val<jinja::value_string>(compiled_->bos_token));
    context.set_val("eos_token", jinja::mk_val<jinja::value_string>(compiled_->eos_token));
    for (const auto& [key, value] : input.extra.items()) context.set_val(key, ToJinja(value));
    context.set_val("messages", ToJinja(messages));
    context.set_val("tools", ToJinja(input.tools));
    context.set_val("documents", jinja::mk_val<jinja::value_none>());
    context.set_val("add_generation_prompt",
                    jinja::mk_val<jinja::value_bool>(input.add_generation_prompt));
    jinja::runtime runtime(context);
    const jinja::value results = runtime.execute(compiled_->program);
    return jinja::runtime::gather_string_parts(results)->as_string().str();
  } catch (const std::exception& e) {
    return TemplateError(e.what());
  }
}

const std::string& ChatTemplate::source() const { return compiled_->source; }
const std::string& ChatTemplate::bos_token() const { return compiled_->bos_token; }

}  // namespace baton::engine
