#include "router/http_openai.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>
#include <vector>

#include "absl/random/random.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "engine/sampling_params.h"
#include "router/http_errors.h"
#include "router/openai_json_fields.h"
#include "router/openai_structured_output.h"

namespace baton::router {
namespace {

using json = nlohmann::ordered_json;

absl::StatusOr<double> Number(const json& value, absl::string_view param, double min, double max) {
  if (!value.is_number()) {
    return Invalid(param, absl::StrCat("'", param, "' must be a number, got ", TypeName(value)));
  }
  const double v = value.get<double>();
  if (!std::isfinite(v) || v < min || v > max) {
    return Invalid(param, absl::StrCat("'", param, "' must be in [", min, ", ", max, "], got ",
                                       value.dump()));
  }
  return v;
}

absl::StatusOr<int64_t> Integer(const json& value, absl::string_view param, int64_t min,
                                int64_t max) {
  int64_t v = 0;
  if (value.is_number_unsigned()) {
    const uint64_t u = value.get<uint64_t>();
    v = u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())
            ? std::numeric_limits<int64_t>::max()
            : static_cast<int64_t>(u);
  } else if (value.is_number_integer()) {
    v = value.get<int64_t>();
  } else if (value.is_number_float() && std::isfinite(value.get<double>()) &&
             std::floor(value.get<double>()) == value.get<double>() &&
             std::fabs(value.get<double>()) < 9.0e18) {
    v = static_cast<int64_t>(value.get<double>());
  } else {
    return Invalid(param, absl::StrCat("'", param, "' must be an integer, got ",
                                       value.is_number() ? value.dump() : TypeName(value)));
  }
  if (v < min || v > max) {
    return Invalid(param, absl::StrCat("'", param, "' must be in [", min, ", ", max, "], got ",
                                       value.dump()));
  }
  return v;
}

// Token ids: every element an integer (the vocabulary is checked by the intake).
absl::Status TokenIds(const json& array, absl::string_view param, v1::TokenIds& out) {
  for (size_t i = 0; i < array.size(); ++i) {
    absl::StatusOr<int64_t> id =
        Integer(array[i], absl::StrCat(param, "[", i, "]"), std::numeric_limits<int32_t>::min(),
                std::numeric_limits<int32_t>::max());
    if (!id.ok()) return id.status();
    out.add_ids(static_cast<int32_t>(*id));
  }
  return absl::OkStatus();
}

// prompt: "text" | ["text"] | [id, ...] | [[id, ...]]
absl::Status ParsePrompt(const json& body, v1::GenerateRequest& request) {
  const json* prompt = Field(body, "prompt");
  if (prompt == nullptr) return Invalid("prompt", "'prompt' is required");
  if (prompt->is_string()) {
    const std::string& text = prompt->get_ref<const std::string&>();
    if (text.empty()) return Invalid("prompt", "prompt is empty");
    request.set_prompt(text);
    return absl::OkStatus();
  }
  if (!prompt->is_array()) {
    return Invalid("prompt", absl::StrCat("'prompt' must be a string, an array of one string or "
                                          "an array of token ids, got ",
                                          TypeName(*prompt)));
  }
  if (prompt->empty()) return Invalid("prompt", "prompt is empty");
  const json& first = (*prompt)[0];
  if (first.is_number()) return TokenIds(*prompt, "prompt", *request.mutable_prompt_tokens());
  if (prompt->size() > 1) {
    return Invalid("prompt",
                   absl::StrCat("'prompt' holds ", prompt->size(),
                                " prompts; this server takes one prompt per request"));
  }
  if (first.is_string()) {
    const std::string& text = first.get_ref<const std::string&>();
    if (text.empty()) return Invalid("prompt", "prompt is empty");
    request.set_prompt(text);
    return absl::OkStatus();
  }
  if (first.is_array()) {
    if (first.empty()) return Invalid("prompt", "prompt is empty");
    return TokenIds(first, "prompt[0]", *request.mutable_prompt_tokens());
  }
  return Invalid("prompt", absl::StrCat("'prompt[0]' must be a string or an array of token ids, "
                                        "got ",
                                        TypeName(first)));
}

// OpenAI's function names: letters, digits, '_' and '-', at most 64.
bool IsFunctionName(const std::string& name) {
  if (name.empty() || name.size() > 64) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-';
  });
}

// tools: [{"type": "function", "function": {"name", "description"?, "parameters"?, "strict"?}}],
// at most kMaxTools, names distinct; handed to the template as sent.
absl::Status ParseTools(const json& body, v1::ChatMessages& chat) {
  const json* tools = Field(body, "tools");
  if (tools == nullptr) return absl::OkStatus();
  if (!tools->is_array()) {
    return Invalid("tools", absl::StrCat("'tools' must be an array, got ", TypeName(*tools)));
  }
  if (tools->size() > kMaxTools) {
    return Invalid("tools", absl::StrCat("'tools' has ", tools->size(), " tools, at most ",
                                         kMaxTools, " are allowed"));
  }
  std::vector<std::string> names;
  for (size_t i = 0; i < tools->size(); ++i) {
    const json& tool = (*tools)[i];
    const std::string where = absl::StrCat("tools[", i, "]");
    const json* type = tool.is_object() ? Field(tool, "type") : nullptr;
    if (type == nullptr || *type != "function") {
      return Invalid(absl::StrCat(where, ".type"),
                     absl::StrCat("'", where, ".type' must be \"function\""));
    }
    const json* function = Field(tool, "function");
    if (function == nullptr || !function->is_object()) {
      return Invalid(absl::StrCat(where, ".function"),
                     absl::StrCat("'", where, ".function' must be an object"));
    }
    const json* name = Field(*function, "name");
    if (name == nullptr || !name->is_string() || !IsFunctionName(name->get<std::string>())) {
      return Invalid(absl::StrCat(where, ".function.name"),
                     absl::StrCat("'", where, ".function.name' must be 1 to 64 letters, digits, "
                                  "'_' or '-'"));
    }
    if (std::find(names.begin(), names.end(), name->get<std::string>()) != names.end()) {
      return Invalid(absl::StrCat(where, ".function.name"),
                     absl::StrCat("'", where, ".function.name' repeats '",
                                  name->get<std::string>(), "'"));
    }
    names.push_back(name->get<std::string>());
    const json* parameters = Field(*function, "parameters");
    if (parameters != nullptr && !parameters->is_object()) {
      return Invalid(absl::StrCat(where, ".function.parameters"),
                     absl::StrCat("'", where, ".function.parameters' must be a JSON schema "
                                  "object"));
    }
  }
  if (!tools->empty()) chat.set_tools(tools->dump());
  return absl::OkStatus();
}

// tool_choice: "none" | "auto" (the default with tools) | "required" |
// {"type": "function", "function": {"name": ...}}; the last two constrain the output to calls
// (ConstrainToToolCalls).
absl::Status ParseToolChoice(const json& body, bool has_tools, OpenAiRequest& out) {
  out.parse_tool_calls = has_tools;
  if (const json* parallel = Field(body, "parallel_tool_calls")) {
    absl::StatusOr<bool> v = Bool(*parallel, "parallel_tool_calls");
    if (!v.ok()) return v.status();
    out.parallel_tool_calls = *v;
  }
  const json* choice = Field(body, "tool_choice");
  if (choice == nullptr) return absl::OkStatus();
  if (*choice == "none") {
    out.parse_tool_calls = false;
    return absl::OkStatus();
  }
  if (*choice == "auto") {
    if (!has_tools) return Invalid("tool_choice", "'tool_choice' \"auto\" needs 'tools'");
    return absl::OkStatus();
  }
  std::string function;  // a named function; empty: "required"
  if (choice->is_object()) {
    const json* named = Field(*choice, "function");
    const json* name = named != nullptr && named->is_object() ? Field(*named, "name") : nullptr;
    if (name == nullptr || !name->is_string()) {
      return Invalid("tool_choice", "'tool_choice.function.name' must be a string");
    }
    function = name->get<std::string>();
  }
  if (*choice == "required" || choice->is_object()) {
    if (!has_tools) {
      return Invalid("tool_choice", "'tool_choice' other than \"none\" needs 'tools'");
    }
    out.tool_calls_forced = true;
    return ConstrainToToolCalls(*Field(body, "tools"), function, out.parallel_tool_calls,
                                *out.generate.mutable_sampling());
  }
  return Invalid("tool_choice", "'tool_choice' must be \"none\", \"auto\", \"required\" or "
                                "{\"type\": \"function\", \"function\": {\"name\": ...}}");
}

// content: "text" | [{"type": "text", "text": "..."}, ...] | null (an assistant turn with none)
absl::StatusOr<std::string> MessageContent(const json& message, const std::string& where) {
  const std::string param = absl::StrCat(where, ".content");
  const json* content = Field(message, "content");
  if (content == nullptr) return std::string();
  if (content->is_string()) return content->get<std::string>();
  if (!content->is_array()) {
    return Invalid(param, absl::StrCat("'", param, "' must be a string or an array of content "
                                       "parts, got ",
                                       TypeName(*content)));
  }
  std::string text;
  for (size_t i = 0; i < content->size(); ++i) {
    const json& part = (*content)[i];
    const std::string part_param = absl::StrCat(param, "[", i, "]");
    if (!part.is_object()) {
      return Invalid(part_param, absl::StrCat("'", part_param, "' must be an object"));
    }
    const json* type = Field(part, "type");
    if (type == nullptr || !type->is_string()) {
      return Invalid(part_param, absl::StrCat("'", part_param, ".type' must be a string"));
    }
    if (*type != "text") {
      return Invalid(part_param, absl::StrCat("content parts of type '", type->get<std::string>(),
                                              "' are not supported; only 'text' is"));
    }
    const json* part_text = Field(part, "text");
    if (part_text == nullptr || !part_text->is_string()) {
      return Invalid(part_param, absl::StrCat("'", part_param, ".text' must be a string"));
    }
    text += part_text->get_ref<const std::string&>();
  }
  return text;
}

// An optional string field: absent or null is "", anything but a string an error naming it.
absl::StatusOr<std::string> OptionalString(const json& m, const char* name,
                                           const std::string& where) {
  const json* v = Field(m, name);
  if (v == nullptr) return std::string();
  if (!v->is_string()) {
    return Invalid(absl::StrCat(where, ".", name),
                   absl::StrCat("'", where, ".", name, "' must be a string, got ", TypeName(*v)));
  }
  return v->get<std::string>();
}

// tool_calls: [{"id", "type": "function", "function": {"name", "arguments": "{...}"}}, ...]
absl::Status ParseToolCalls(const json& calls, const std::string& where, v1::ChatMessage& out) {
  if (!calls.is_array()) {
    return Invalid(where, absl::StrCat("'", where, "' must be an array, got ", TypeName(calls)));
  }
  for (size_t i = 0; i < calls.size(); ++i) {
    const std::string at = absl::StrCat(where, "[", i, "]");
    const json* function = calls[i].is_object() ? Field(calls[i], "function") : nullptr;
    if (function == nullptr || !function->is_object()) {
      return Invalid(at, absl::StrCat("'", at, ".function' must be an object"));
    }
    absl::StatusOr<std::string> id = OptionalString(calls[i], "id", at);
    absl::StatusOr<std::string> name = OptionalString(*function, "name", at + ".function");
    if (!id.ok()) return id.status();
    if (!name.ok()) return name.status();
    if (name->empty()) {
      return Invalid(at, absl::StrCat("'", at, ".function.name' must be a non-empty string"));
    }
    v1::ToolCall& call = *out.add_tool_calls();
    call.set_id(*std::move(id));
    call.set_name(*std::move(name));
    // OpenAI's clients send the arguments as JSON text; an object is taken as its text.
    const json* arguments = Field(*function, "arguments");
    if (arguments != nullptr && !arguments->is_null()) {
      call.set_arguments(arguments->is_string() ? arguments->get<std::string>() : arguments->dump());
    }
  }
  return absl::OkStatus();
}

// What a message carries besides role and content: an assistant's tool_calls and
// reasoning_content, a tool message's tool_call_id, and a name.
absl::Status MessageExtras(const json& m, const std::string& where, const std::string& role,
                           v1::ChatMessage& out) {
  if (const json* calls = Field(m, "tool_calls")) {
    if (role != "assistant") {
      return Invalid(absl::StrCat(where, ".tool_calls"),
                     absl::StrCat("'", where, ".tool_calls' is only for assistant messages"));
    }
    if (absl::Status s = ParseToolCalls(*calls, absl::StrCat(where, ".tool_calls"), out); !s.ok()) {
      return s;
    }
  }
  absl::StatusOr<std::string> tool_call_id = OptionalString(m, "tool_call_id", where);
  absl::StatusOr<std::string> name = OptionalString(m, "name", where);
  absl::StatusOr<std::string> reasoning = OptionalString(m, "reasoning_content", where);
  for (const auto* s : {&tool_call_id, &name, &reasoning}) {
    if (!s->ok()) return s->status();
  }
  out.set_tool_call_id(*std::move(tool_call_id));
  out.set_name(*std::move(name));
  out.set_reasoning_content(*std::move(reasoning));
  return absl::OkStatus();
}

absl::Status ParseMessages(const json& body, v1::GenerateRequest& request) {
  const json* messages = Field(body, "messages");
  if (messages == nullptr) return Invalid("messages", "'messages' is required");
  if (!messages->is_array()) {
    return Invalid("messages",
                   absl::StrCat("'messages' must be an array, got ", TypeName(*messages)));
  }
  if (messages->empty()) return Invalid("messages", "prompt is empty: 'messages' is empty");
  v1::ChatMessages& chat = *request.mutable_chat();
  for (size_t i = 0; i < messages->size(); ++i) {
    const json& m = (*messages)[i];
    const std::string where = absl::StrCat("messages[", i, "]");
    if (!m.is_object()) return Invalid(where, absl::StrCat("'", where, "' must be an object"));
    const json* role = Field(m, "role");
    if (role == nullptr || !role->is_string()) {
      return Invalid(absl::StrCat(where, ".role"),
                     absl::StrCat("'", where, ".role' must be a string"));
    }
    std::string role_name = role->get<std::string>();
    if (role_name == "developer") role_name = "system";  // OpenAI's newer name for it
    if (role_name != "system" && role_name != "user" && role_name != "assistant" &&
        role_name != "tool") {
      return Invalid(absl::StrCat(where, ".role"),
                     absl::StrCat("'", where, ".role' must be one of system, developer, user, "
                                  "assistant, tool; got '",
                                  role_name, "'"));
    }
    absl::StatusOr<std::string> content = MessageContent(m, where);
    if (!content.ok()) return content.status();
    v1::ChatMessage& out = *chat.add_messages();
    out.set_content(*std::move(content));
    if (absl::Status s = MessageExtras(m, where, role_name, out); !s.ok()) return s;
    out.set_role(std::move(role_name));
  }
  if (absl::Status s = ParseTools(body, chat); !s.ok()) return s;
  if (const json* kwargs = Field(body, "chat_template_kwargs")) {
    if (!kwargs->is_object()) {
      return Invalid("chat_template_kwargs",
                     absl::StrCat("'chat_template_kwargs' must be an object, got ",
                                  TypeName(*kwargs)));
    }
    chat.set_template_kwargs(kwargs->dump());
  }
  if (const json* add = Field(body, "add_generation_prompt")) {
    if (!add->is_boolean()) {
      return Invalid("add_generation_prompt",
                     absl::StrCat("'add_generation_prompt' must be true or false, got ",
                                  TypeName(*add)));
    }
    chat.set_add_generation_prompt(add->get<bool>());
  }
  return absl::OkStatus();
}

absl::Status ParseStop(const json& stop, v1::SamplingParams& sampling) {
  std::vector<std::string> strings;
  if (stop.is_string()) {
    strings.push_back(stop.get<std::string>());
  } else if (stop.is_array()) {
    for (size_t i = 0; i < stop.size(); ++i) {
      if (!stop[i].is_string()) {
        return Invalid("stop", absl::StrCat("'stop[", i, "]' must be a string, got ",
                                            TypeName(stop[i])));
      }
      strings.push_back(stop[i].get<std::string>());
    }
  } else {
    return Invalid("stop", absl::StrCat("'stop' must be a string or an array of strings, got ",
                                        TypeName(stop)));
  }
  if (strings.size() > static_cast<size_t>(engine::kMaxStopStrings)) {
    return Invalid("stop", absl::StrCat("'stop' has ", strings.size(), " strings, at most ",
                                        engine::kMaxStopStrings, " are allowed"));
  }
  for (std::string& s : strings) {
    if (s.empty()) return Invalid("stop", "'stop' strings must not be empty");
    sampling.add_stop(std::move(s));
  }
  return absl::OkStatus();
}

// Known OpenAI features this server does not implement: refused unless "off".
absl::Status RefuseUnsupported(const json& body, OpenAiEndpoint endpoint) {
  if (const json* v = Field(body, "suffix")) {
    if (!(v->is_string() && v->get_ref<const std::string&>().empty())) {
      return Unsupported("suffix", "'suffix'");
    }
  }
  if (const json* v = Field(body, "functions")) {
    if (!(v->is_array() && v->empty())) {
      return Unsupported("functions", "'functions' (the legacy form of 'tools')");
    }
  }
  if (endpoint == OpenAiEndpoint::kCompletions) {
    for (const char* name : {"tools", "tool_choice"}) {
      if (Field(body, name) != nullptr) {
        return Unsupported(name, absl::StrCat("'", name, "' on /v1/completions"));
      }
    }
  }
  return absl::OkStatus();
}

// "best_of": completions only, in [n, kMaxChoices]; n when absent; not with a stream when more
// than n (the answer is known only once every candidate is done).
absl::StatusOr<int32_t> ParseBestOf(const json& body, OpenAiEndpoint endpoint, int32_t n,
                                    bool stream) {
  const json* v = Field(body, "best_of");
  if (v == nullptr) return n;
  if (endpoint != OpenAiEndpoint::kCompletions) {
    return Unsupported("best_of", "'best_of' on /v1/chat/completions");
  }
  absl::StatusOr<int64_t> best_of = Integer(*v, "best_of", 1, kMaxChoices);
  if (!best_of.ok()) return best_of.status();
  if (*best_of < n) {
    return Invalid("best_of", absl::StrCat("'best_of' must be at least 'n' (", n, "), got ",
                                           *best_of));
  }
  if (*best_of > n && stream) {
    return Invalid("best_of", "'best_of' greater than 'n' cannot be combined with 'stream'");
  }
  return static_cast<int32_t>(*best_of);
}

// "echo": completions only, and not with a stream (its prompt entries would precede the first
// chunk's role and text: a client reads them more simply from the whole answer).
absl::StatusOr<bool> ParseEcho(const json& body, OpenAiEndpoint endpoint, bool stream) {
  const json* v = Field(body, "echo");
  if (v == nullptr) return false;
  absl::StatusOr<bool> echo = Bool(*v, "echo");
  if (!echo.ok() || !*echo) return echo;
  if (endpoint != OpenAiEndpoint::kCompletions) {
    return Unsupported("echo", "'echo' on /v1/chat/completions");
  }
  if (stream) return Invalid("echo", "'echo' cannot be combined with 'stream': true");
  return true;
}

// Completions' "logprobs": n, the n most likely tokens (and the generated one) at each position.
// Chat's "logprobs": true, with "top_logprobs": n of the most likely (0 when absent).
absl::Status ParseLogprobs(const json& body, OpenAiEndpoint endpoint,
                           v1::SamplingParams& sampling) {
  const json* logprobs = Field(body, "logprobs");
  if (endpoint == OpenAiEndpoint::kCompletions) {
    if (logprobs == nullptr) return absl::OkStatus();
    if (logprobs->is_boolean()) {
      return Invalid("logprobs", "'logprobs' of /v1/completions must be an integer (how many of "
                                 "the most likely tokens to return), got boolean");
    }
    absl::StatusOr<int64_t> n = Integer(*logprobs, "logprobs", 0, engine::kMaxLogprobs);
    if (!n.ok()) return n.status();
    sampling.set_logprobs(static_cast<int32_t>(*n));
    return absl::OkStatus();
  }
  bool wanted = false;
  if (logprobs != nullptr) {
    absl::StatusOr<bool> b = Bool(*logprobs, "logprobs");
    if (!b.ok()) return b.status();
    wanted = *b;
  }
  int64_t top = 0;
  if (const json* v = Field(body, "top_logprobs")) {
    absl::StatusOr<int64_t> n = Integer(*v, "top_logprobs", 0, engine::kMaxLogprobs);
    if (!n.ok()) return n.status();
    if (!wanted) {
      return Invalid("top_logprobs", "'top_logprobs' needs 'logprobs': true");
    }
    top = *n;
  }
  if (wanted) sampling.set_logprobs(static_cast<int32_t>(top));
  return absl::OkStatus();
}

// "logit_bias": {"<token id>": bias in [-100, 100], ...}. Token ids are checked against the
// vocabulary at intake.
absl::Status ParseLogitBias(const json& body, v1::SamplingParams& sampling) {
  const json* bias = Field(body, "logit_bias");
  if (bias == nullptr) return absl::OkStatus();
  if (!bias->is_object()) {
    return Invalid("logit_bias", absl::StrCat("'logit_bias' must be an object of token ids and "
                                              "biases, got ", TypeName(*bias)));
  }
  if (bias->size() > engine::kMaxLogitBiasTokens) {
    return Invalid("logit_bias", absl::StrCat("'logit_bias' has ", bias->size(),
                                              " tokens, at most ", engine::kMaxLogitBiasTokens,
                                              " are allowed"));
  }
  for (const auto& [key, value] : bias->items()) {
    int32_t token = 0;
    if (!absl::SimpleAtoi(key, &token)) {
      return Invalid("logit_bias", absl::StrCat("'logit_bias' keys must be token ids, got '",
                                                key.substr(0, 32), "'"));
    }
    absl::StatusOr<double> b = Number(value, "logit_bias", -engine::kMaxLogitBias,
                                      engine::kMaxLogitBias);
    if (!b.ok()) return b.status();
    (*sampling.mutable_logit_bias())[token] = static_cast<float>(*b);
  }
  return absl::OkStatus();
}

absl::Status ParseSampling(const json& body, OpenAiEndpoint endpoint,
                           v1::SamplingParams& sampling) {
  if (absl::Status s = ParseLogprobs(body, endpoint, sampling); !s.ok()) return s;
  if (absl::Status s = ParseLogitBias(body, sampling); !s.ok()) return s;
  // max_completion_tokens (chat's current name) wins over max_tokens.
  const json* max_tokens = Field(body, "max_completion_tokens");
  const char* max_tokens_name = "max_completion_tokens";
  if (max_tokens == nullptr) {
    max_tokens = Field(body, "max_tokens");
    max_tokens_name = "max_tokens";
  }
  if (max_tokens != nullptr) {
    absl::StatusOr<int64_t> v =
        Integer(*max_tokens, max_tokens_name, 1, std::numeric_limits<int32_t>::max());
    if (!v.ok()) return v.status();
    sampling.set_max_tokens(static_cast<int32_t>(*v));
  } else if (endpoint == OpenAiEndpoint::kCompletions) {
    sampling.set_max_tokens(kCompletionsDefaultMaxTokens);
  }
  // OpenAI's default temperature is 1 (the wire's 0 would mean greedy).
  sampling.set_temperature(1.0f);
  if (const json* v = Field(body, "temperature")) {
    absl::StatusOr<double> t = Number(*v, "temperature", 0.0, 2.0);
    if (!t.ok()) return t.status();
    sampling.set_temperature(static_cast<float>(*t));
  }
  if (const json* v = Field(body, "top_p")) {
    absl::StatusOr<double> p = Number(*v, "top_p", 0.0, 1.0);
    if (!p.ok()) return p.status();
    if (*p <= 0.0) return Invalid("top_p", "'top_p' must be in (0, 1], got 0");
    sampling.set_top_p(static_cast<float>(*p));
  }
  if (const json* v = Field(body, "top_k")) {
    absl::StatusOr<int64_t> k = Integer(*v, "top_k", -1, std::numeric_limits<int32_t>::max());
    if (!k.ok()) return k.status();
    sampling.set_top_k(*k < 0 ? 0 : static_cast<int32_t>(*k));  // -1: off, as vLLM
  }
  if (const json* v = Field(body, "min_p")) {
    absl::StatusOr<double> p = Number(*v, "min_p", 0.0, 1.0);
    if (!p.ok()) return p.status();
    sampling.set_min_p(static_cast<float>(*p));
  }
  if (const json* v = Field(body, "presence_penalty")) {
    absl::StatusOr<double> p =
        Number(*v, "presence_penalty", engine::kMinPenalty, engine::kMaxPenalty);
    if (!p.ok()) return p.status();
    sampling.set_presence_penalty(static_cast<float>(*p));
  }
  if (const json* v = Field(body, "frequency_penalty")) {
    absl::StatusOr<double> p =
        Number(*v, "frequency_penalty", engine::kMinPenalty, engine::kMaxPenalty);
    if (!p.ok()) return p.status();
    sampling.set_frequency_penalty(static_cast<float>(*p));
  }
  // Extensions that vLLM and llama.cpp's server also take.
  if (const json* v = Field(body, "repetition_penalty")) {
    absl::StatusOr<double> p = Number(*v, "repetition_penalty", 0.0, 100.0);
    if (!p.ok()) return p.status();
    if (*p <= 0.0) return Invalid("repetition_penalty", "'repetition_penalty' must be > 0");
    sampling.set_repetition_penalty(static_cast<float>(*p));
  }
  if (const json* v = Field(body, "ignore_eos")) {
    absl::StatusOr<bool> b = Bool(*v, "ignore_eos");
    if (!b.ok()) return b.status();
    sampling.set_ignore_eos(*b);
  }
  // vLLM's: false keeps control tokens the model generates in the text.
  if (const json* v = Field(body, "skip_special_tokens")) {
    absl::StatusOr<bool> b = Bool(*v, "skip_special_tokens");
    if (!b.ok()) return b.status();
    sampling.set_skip_special_tokens(*b);
  }
  // baton's own: "speculative": false opts the request out of speculative decoding.
  if (const json* v = Field(body, "speculative")) {
    absl::StatusOr<bool> b = Bool(*v, "speculative");
    if (!b.ok()) return b.status();
    sampling.set_disable_speculation(!*b);
  }
  if (const json* v = Field(body, "seed")) {
    absl::StatusOr<int64_t> seed = Integer(*v, "seed", std::numeric_limits<int64_t>::min(),
                                           std::numeric_limits<int64_t>::max());
    if (!seed.ok()) return seed.status();
    sampling.set_seed(v->is_number_unsigned() ? v->get<uint64_t>()
                                              : static_cast<uint64_t>(*seed));
  }
  if (const json* v = Field(body, "stop")) {
    if (absl::Status s = ParseStop(*v, sampling); !s.ok()) return s;
  }
  return absl::OkStatus();
}

json NullIfEmpty(const std::string& s) { return s.empty() ? json(nullptr) : json(s); }

json Base(const OpenAiResponseContext& context, const char* object) {
  return {{"id", context.id},
          {"object", object},
          {"created", context.created},
          {"model", context.model},
          {"system_fingerprint", NullIfEmpty(context.system_fingerprint)}};
}

}  // namespace

absl::StatusOr<json> ParseJson(const std::string& text) {
  struct TooDeep {};
  try {
    return json::parse(text, [](int depth, json::parse_event_t event, json& /*parsed*/) {
      const bool opens = event == json::parse_event_t::object_start ||
                         event == json::parse_event_t::array_start;
      if (opens && depth >= kMaxJsonDepth) throw TooDeep{};
      return true;
    });
  } catch (const TooDeep&) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the JSON nests objects and arrays more than ", kMaxJsonDepth, " levels deep"));
  } catch (const json::exception& e) {
    // nlohmann's lexer also refuses ill-formed UTF-8 and lone surrogates here.
    return absl::InvalidArgumentError(absl::StrCat("not valid JSON: ", e.what()));
  }
}

absl::StatusOr<json> ParseJsonBody(const std::string& body) {
  absl::StatusOr<json> root = ParseJson(body);
  if (!root.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("the request body: ", root.status().message()));
  }
  if (!root->is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat("the request body must be a JSON object, got ", TypeName(*root)));
  }
  return root;
}

absl::StatusOr<OpenAiRequest> ParseOpenAiRequest(OpenAiEndpoint endpoint, const std::string& body,
                                                 absl::string_view model_id,
                                                 absl::string_view model_alias) {
  absl::StatusOr<json> root = ParseJsonBody(body);
  if (!root.ok()) return root.status();
  return ParseOpenAiRequest(endpoint, *root, model_id, model_alias);
}

absl::StatusOr<OpenAiRequest> ParseOpenAiRequest(OpenAiEndpoint endpoint, const json& root,
                                                 absl::string_view model_id,
                                                 absl::string_view model_alias) {
  OpenAiRequest out;
  out.endpoint = endpoint;
  if (const json* model = Field(root, "model")) {
    if (!model->is_string()) {
      return Invalid("model", absl::StrCat("'model' must be a string, got ", TypeName(*model)));
    }
    const std::string& name = model->get_ref<const std::string&>();
    if (name != model_id && (model_alias.empty() || name != model_alias)) {
      return WithErrorCode(
          WithParam(absl::NotFoundError(absl::StrCat("The model '", name,
                                                     "' does not exist; this server serves '",
                                                     model_id, "'")),
                    "model"),
          "model_not_found");
    }
    out.generate.set_model(name);
  }
  if (const json* n = Field(root, "n")) {
    absl::StatusOr<int64_t> v = Integer(*n, "n", 1, kMaxChoices);
    if (!v.ok()) return v.status();
    out.n = static_cast<int32_t>(*v);
  }
  if (const json* stream = Field(root, "stream")) {
    absl::StatusOr<bool> v = Bool(*stream, "stream");
    if (!v.ok()) return v.status();
    out.stream = *v;
  }
  if (const json* options = Field(root, "stream_options")) {
    if (!out.stream) {
      return Invalid("stream_options", "'stream_options' is only allowed when 'stream' is true");
    }
    if (!options->is_object()) {
      return Invalid("stream_options", absl::StrCat("'stream_options' must be an object, got ",
                                                    TypeName(*options)));
    }
    if (const json* usage = Field(*options, "include_usage")) {
      absl::StatusOr<bool> v = Bool(*usage, "stream_options.include_usage");
      if (!v.ok()) return v.status();
      out.include_usage = *v;
    }
  }
  // vLLM's: requests share cached KV only with requests of the same salt.
  if (const json* salt = Field(root, "cache_salt")) {
    if (!salt->is_string()) {
      return Invalid("cache_salt",
                     absl::StrCat("'cache_salt' must be a string, got ", TypeName(*salt)));
    }
    out.generate.set_cache_salt(salt->get<std::string>());
  }
  if (absl::Status s = RefuseUnsupported(root, endpoint); !s.ok()) return s;
  v1::SamplingParams& sampling = *out.generate.mutable_sampling();
  if (absl::Status s = ParseSampling(root, endpoint, sampling); !s.ok()) return s;
  if (absl::Status s = ParseStructuredOutput(root, sampling); !s.ok()) return s;
  absl::StatusOr<int32_t> best_of = ParseBestOf(root, endpoint, out.n, out.stream);
  if (!best_of.ok()) return best_of.status();
  out.best_of = *best_of;
  absl::StatusOr<bool> echo = ParseEcho(root, endpoint, out.stream);
  if (!echo.ok()) return echo.status();
  out.echo = *echo;
  if (out.echo && sampling.has_logprobs()) sampling.set_prompt_logprobs(sampling.logprobs());
  absl::Status input = endpoint == OpenAiEndpoint::kCompletions
                           ? ParsePrompt(root, out.generate)
                           : ParseMessages(root, out.generate);
  if (!input.ok()) return input;
  if (endpoint == OpenAiEndpoint::kChatCompletions) {
    const bool has_tools = !out.generate.chat().tools().empty();
    if (absl::Status s = ParseToolChoice(root, has_tools, out); !s.ok()) return s;
  }
  return out;
}

const char* OpenAiFinishReason(v1::FinishReason reason) {
  return reason == v1::FINISH_REASON_LENGTH ? "length" : "stop";
}

json OpenAiUsage(const v1::Usage& usage) {
  return {{"prompt_tokens", usage.prompt_tokens()},
          {"completion_tokens", usage.completion_tokens()},
          {"total_tokens", usage.prompt_tokens() + usage.completion_tokens()},
          {"prompt_tokens_details", {{"cached_tokens", usage.cached_prompt_tokens()}}}};
}

v1::Usage CombinedUsage(const std::vector<v1::Usage>& choices) {
  v1::Usage usage;
  if (choices.empty()) return usage;
  usage.set_prompt_tokens(choices[0].prompt_tokens());
  usage.set_cached_prompt_tokens(choices[0].cached_prompt_tokens());
  int32_t completion = 0;
  for (const v1::Usage& choice : choices) completion += choice.completion_tokens();
  usage.set_completion_tokens(completion);
  return usage;
}

std::string NewToolCallId() {
  thread_local absl::BitGen gen;
  return absl::StrFormat("call_%016x%08x", absl::Uniform<uint64_t>(gen),
                         absl::Uniform<uint32_t>(gen));
}

json OpenAiToolCalls(const std::vector<ParsedToolCall>& calls, int first_index) {
  json out = json::array();
  for (size_t i = 0; i < calls.size(); ++i) {
    json call;
    if (first_index >= 0) call["index"] = first_index + static_cast<int>(i);
    call["id"] = NewToolCallId();
    call["type"] = "function";
    call["function"] = {{"name", calls[i].name}, {"arguments", calls[i].arguments}};
    out.push_back(std::move(call));
  }
  return out;
}

json OpenAiChoice(OpenAiEndpoint endpoint, int index, const std::string& text,
                  v1::FinishReason finish_reason, json logprobs,
                  const std::vector<ParsedToolCall>& tool_calls) {
  json choice = {{"index", index}};
  if (endpoint == OpenAiEndpoint::kChatCompletions) {
    choice["message"] = {{"role", "assistant"}, {"content", text}};
    if (!tool_calls.empty()) {
      if (absl::StripAsciiWhitespace(text).empty()) choice["message"]["content"] = nullptr;
      choice["message"]["tool_calls"] = OpenAiToolCalls(tool_calls);
    }
  } else {
    choice["text"] = text;
  }
  choice["logprobs"] = std::move(logprobs);
  choice["finish_reason"] = tool_calls.empty() ? OpenAiFinishReason(finish_reason) : "tool_calls";
  return choice;
}

json OpenAiCompletion(const OpenAiResponseContext& context, json choices, const v1::Usage& usage) {
  const bool chat = context.endpoint == OpenAiEndpoint::kChatCompletions;
  json out = Base(context, chat ? "chat.completion" : "text_completion");
  out["choices"] = std::move(choices);
  out["usage"] = OpenAiUsage(usage);
  return out;
}

json OpenAiCompletion(const OpenAiResponseContext& context, const std::string& text,
                      v1::FinishReason finish_reason, const v1::Usage& usage, json logprobs) {
  return OpenAiCompletion(
      context,
      json::array({OpenAiChoice(context.endpoint, 0, text, finish_reason, std::move(logprobs))}),
      usage);
}

std::string SseData(const json& value) {
  // Generated text is complete UTF-8; replacing keeps a stray byte from ending the stream.
  return absl::StrCat("data: ", value.dump(-1, ' ', false, json::error_handler_t::replace),
                      "\n\n");
}

json OpenAiStreamEncoder::Chunk(json choice) const {
  const bool chat = context_.endpoint == OpenAiEndpoint::kChatCompletions;
  json out = Base(context_, chat ? "chat.completion.chunk" : "text_completion");
  out["choices"] = choice.is_null() ? json::array() : json::array({std::move(choice)});
  if (include_usage_) out["usage"] = nullptr;
  return out;
}

OpenAiStreamEncoder::OpenAiStreamEncoder(OpenAiResponseContext context, bool include_usage,
                                         std::optional<OpenAiLogprobs> logprobs, int n_choices,
                                         std::optional<ToolCallReading> tool_calls)
    : context_(std::move(context)),
      include_usage_(include_usage),
      parallel_tool_calls_(!tool_calls.has_value() || tool_calls->parallel),
      choices_(static_cast<size_t>(n_choices), Choice{.logprobs = std::move(logprobs)}) {
  if (!tool_calls.has_value()) return;
  for (Choice& choice : choices_) choice.tool_calls.emplace(tool_calls->format);
}

std::string OpenAiStreamEncoder::Message(const v1::GenerateResponse& message, int index) {
  const bool chat = context_.endpoint == OpenAiEndpoint::kChatCompletions;
  Choice& state = choices_.at(static_cast<size_t>(index));
  const bool finished = message.finish_reason() != v1::FINISH_REASON_UNSPECIFIED;
  std::string text = message.text();
  std::vector<ParsedToolCall> calls;
  if (state.tool_calls.has_value()) {
    ToolCallStream::Delta delta = state.tool_calls->Feed(text);
    if (finished) {
      ToolCallStream::Delta last = state.tool_calls->Finish();
      delta.content += last.content;
      for (ParsedToolCall& call : last.tool_calls) delta.tool_calls.push_back(std::move(call));
    }
    text = std::move(delta.content);
    calls = std::move(delta.tool_calls);
    if (!parallel_tool_calls_) {
      calls.resize(std::min<size_t>(calls.size(), state.calls_sent > 0 ? 0 : 1));
    }
  }
  std::string out;
  json logprobs = nullptr;  // of this message's tokens, when the request asked
  if (state.logprobs.has_value() && message.tokens_size() > 0) {
    logprobs = state.logprobs->Empty();
    state.logprobs->Append(message, logprobs);
  }
  auto content_choice = [&](json delta_or_text, json choice_logprobs) {
    json choice = {{"index", index}};
    if (chat) {
      choice["delta"] = std::move(delta_or_text);
    } else {
      choice["text"] = std::move(delta_or_text);
    }
    choice["logprobs"] = std::move(choice_logprobs);
    choice["finish_reason"] = nullptr;
    return choice;
  };
  if (chat && !state.sent_role) {
    // The first chunk names the role, even when the first token is not yet complete text.
    out += SseData(Chunk(content_choice({{"role", "assistant"}, {"content", text}},
                                        std::move(logprobs))));
    state.sent_role = true;
  } else if (!text.empty() || !logprobs.is_null()) {
    // Tokens whose text is held back still bring their log-probabilities.
    out += SseData(
        Chunk(content_choice(chat ? json{{"content", text}} : json(text), std::move(logprobs))));
  }
  if (!calls.empty()) {
    out += SseData(Chunk(
        content_choice({{"tool_calls", OpenAiToolCalls(calls, state.calls_sent)}}, nullptr)));
    state.calls_sent += static_cast<int>(calls.size());
  }
  if (finished) {
    json choice = content_choice(chat ? json::object() : json(""), nullptr);
    choice["finish_reason"] =
        state.calls_sent > 0 ? "tool_calls" : OpenAiFinishReason(message.finish_reason());
    out += SseData(Chunk(std::move(choice)));
    state.usage = message.usage();
  }
  return out;
}

std::string OpenAiStreamEncoder::End(const absl::Status& status) {
  std::string out;
  std::vector<v1::Usage> usages;
  for (const Choice& choice : choices_) {
    if (choice.usage.has_value()) usages.push_back(*choice.usage);
  }
  if (!status.ok()) {
    out += SseData(HttpErrorJson(HttpErrorFromStatus(status)));
  } else if (include_usage_ && usages.size() == choices_.size()) {
    json last = Chunk(nullptr);
    last["usage"] = OpenAiUsage(CombinedUsage(usages));
    out += SseData(last);
  }
  out += kSseDone;
  return out;
}

}  // namespace baton::router
