// Chat templates: turning a conversation into the prompt text the model was trained on, with the
// model's own Jinja template (tokenizer.chat_template in a GGUF file, or one a user names).
//
// Rendering follows transformers' apply_chat_template: jinja2's sandboxed environment with
// trim_blocks and lstrip_blocks, its tojson (no HTML escaping; ensure_ascii, indent and separators
// as json.dumps takes them), raise_exception, strftime_now (local time), the variables messages,
// tools (none when the request has no tools), documents (none), add_generation_prompt,
// bos_token, eos_token and the request's extra variables (Qwen3's enable_thinking, ...). A
// message's reasoning under any of its names (reasoning_content, thinking, reasoning) is given
// under "thinking" and "reasoning_content" too, as transformers does; a tool call's arguments
// sent as JSON text of an object (as OpenAI's clients send them) are given as that object, as
// vLLM and llama.cpp give them (templates write them with tojson). The engine is llama.cpp's
// (third_party/llama-jinja, built from its PyPI source distribution).
//
// The rendered text contains special-token text: encode it with parse_special.
//
// Thread-safety: a ChatTemplate is immutable after Compile; Render may run on many threads at once.
#ifndef BATON_ENGINE_CHAT_TEMPLATE_H_
#define BATON_ENGINE_CHAT_TEMPLATE_H_

#include <ctime>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace baton::engine {

// What a template renders. JSON keeps its objects' key order: a template's tojson of a tool or a
// tool call's arguments writes them in the order the client sent them, as Python's dicts do.
struct ChatTemplateInput {
  // Messages as OpenAI's chat API sends them: role, content (a string, null, or a list of parts),
  // and name, tool_calls, tool_call_id, reasoning_content where present.
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  // Tool schemas ({"type": "function", "function": {...}}); null when the request has none.
  nlohmann::ordered_json tools = nullptr;
  bool add_generation_prompt = true;
  // Further variables the template may read (an object), e.g. {"enable_thinking": false}; they
  // may not replace messages, tools, documents or add_generation_prompt.
  nlohmann::ordered_json extra = nlohmann::ordered_json::object();

  // From a request object as vLLM's chat API takes one: "messages" (required), "tools",
  // "add_generation_prompt" (default true) and "chat_template_kwargs" (the extra variables).
  // INVALID_ARGUMENT naming the field that is missing or of the wrong type.
  static absl::StatusOr<ChatTemplateInput> FromRequest(const nlohmann::ordered_json& request);
};

// How deep the JSON of a template's input may nest (a message with tool calls needs 6 levels and
// its arguments' own): deeper input is refused before anything walks it.
inline constexpr int kMaxChatInputDepth = 32;

// Whether `json` nests at most `levels` deep (a scalar is 0 deep, [] and {} 1). Visits at most
// `levels` + 1 levels.
bool JsonNestsWithin(const nlohmann::ordered_json& json, int levels);

class ChatTemplate {
 public:
  // Parses `source`. `bos_token` and `eos_token` are the texts the template sees under those
  // names. INVALID_ARGUMENT naming the template's error and where it is when it does not parse.
  static absl::StatusOr<ChatTemplate> Compile(std::string_view source, std::string bos_token,
                                              std::string eos_token);

  // The rendered prompt. INVALID_ARGUMENT "chat template: ..." naming the template's error (one
  // it raises with raise_exception, or one of evaluation) when it fails; INVALID_ARGUMENT when
  // the input nests deeper than kMaxChatInputDepth or a string in it is not valid UTF-8 (naming
  // the message). `now` is the time strftime_now formats.
  absl::StatusOr<std::string> Render(const ChatTemplateInput& input,
                                     std::time_t now = std::time(nullptr)) const;

  const std::string& source() const;
  const std::string& bos_token() const;

 private:
  struct Compiled;
  explicit ChatTemplate(std::shared_ptr<const Compiled> compiled)
      : compiled_(std::move(compiled)) {}
  std::shared_ptr<const Compiled> compiled_;
};

}  // namespace baton::engine

#endif  // BATON_ENGINE_CHAT_TEMPLATE_H_
