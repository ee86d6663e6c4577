#include "engine/chat_template_source.h"

#include <fstream>
#include <sstream>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "engine/unicode.h"

namespace baton::engine {
namespace {

// A chat template is a few kilobytes; the largest in llama.cpp's corpus is under 20 KiB.
constexpr int64_t kMaxChatTemplateBytes = 1 << 20;

constexpr std::string_view kChatML = R"jinja({% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %})jinja";

constexpr std::string_view kLlama3 = R"jinja({% set loop_messages = messages %}{% for message in loop_messages %}{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %})jinja";

constexpr std::string_view kGemma = R"jinja({{ bos_token }}
{%- if messages[0]['role'] == 'system' -%}
    {%- if messages[0]['content'] is string -%}
        {%- set first_user_prefix = messages[0]['content'] + '\n\n' -%}
    {%- else -%}
        {%- set first_user_prefix = messages[0]['content'][0]['text'] + '\n\n' -%}
    {%- endif -%}
    {%- set loop_messages = messages[1:] -%}
{%- else -%}
    {%- set first_user_prefix = "" -%}
    {%- set loop_messages = messages -%}
{%- endif -%}
{%- for message in loop_messages -%}
    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}
        {{ raise_exception("Conversation roles must alternate user/assistant/user/assistant/...") }}
    {%- endif -%}
    {%- if (message['role'] == 'assistant') -%}
        {%- set role = "model" -%}
    {%- else -%}
        {%- set role = message['role'] -%}
    {%- endif -%}
    {{ '<start_of_turn>' + role + '\n' + (first_user_prefix if loop.first else "") }}
    {%- if message['content'] is string -%}
        {{ message['content'] | trim }}
    {%- elif message['content'] is iterable -%}
        {%- for item in message['content'] -%}
            {%- if item['type'] == 'image' -%}
                {{ '<start_of_image>' }}
            {%- elif item['type'] == 'text' -%}
                {{ item['text'] | trim }}
            {%- endif -%}
        {%- endfor -%}
    {%- else -%}
        {{ raise_exception("Invalid content type") }}
    {%- endif -%}
    {{ '<end_of_turn>\n' }}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{'<start_of_turn>model\n'}}
{%- endif -%}
)jinja";

absl::StatusOr<std::string> ReadTemplateFile(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  if (!file) {
    return absl::NotFoundError(absl::StrCat("chat template '", path, "' is neither a file nor one ",
                                            "of the built-in templates (",
                                            kBuiltinChatTemplateNames, ")"));
  }
  std::ostringstream text;
  text << file.rdbuf();
  std::string source = std::move(text).str();
  if (source.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("chat template file ", path, " is empty"));
  }
  if (static_cast<int64_t>(source.size()) > kMaxChatTemplateBytes) {
    return absl::InvalidArgumentError(absl::StrCat("chat template file ", path, " is larger than ",
                                                   kMaxChatTemplateBytes, " bytes"));
  }
  if (!unicode::IsValidUtf8(source)) {
    return absl::InvalidArgumentError(
        absl::StrCat("chat template file ", path, " is not valid UTF-8"));
  }
  return source;
}

}  // namespace

absl::StatusOr<std::string> ChatTemplateSource(std::string_view choice,
                                               std::string_view model_template) {
  if (choice.empty()) {
    if (model_template.empty()) {
      return absl::NotFoundError(absl::StrCat(
          "the model has no chat template (tokenizer.chat_template); name one with "
          "--chat-template NAME|FILE (built in: ",
          kBuiltinChatTemplateNames, ")"));
    }
    return std::string(model_template);
  }
  if (choice == "chatml") return std::string(kChatML);
  if (choice == "llama3") return std::string(kLlama3);
  if (choice == "gemma") return std::string(kGemma);
  return ReadTemplateFile(std::string(choice));
}

}  // namespace baton::engine
