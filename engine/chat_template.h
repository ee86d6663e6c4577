// Chat templates: turning a conversation into the prompt text the model was trained on.
//
// baton does not interpret Jinja. It recognizes the template families it supports in the model's
// tokenizer.chat_template and renders them in C++ exactly as the reference templates do:
//  - ChatML (SmolLM2, Qwen2, ...): "<|im_start|>" role "\n" content "<|im_end|>\n" per message,
//    then "<|im_start|>assistant\n" as the generation prompt. When the first message is not a
//    system message, a default system message is rendered first (SmolLM2's template does this).
//  - Llama 3: "<|start_header_id|>" role "<|end_header_id|>\n\n" content-trimmed "<|eot_id|>" per
//    message, then "<|start_header_id|>assistant<|end_header_id|>\n\n". The template's leading
//    "<|begin_of_text|>" is not rendered: it is the BOS token, added by encoding with add_bos.
//  - Gemma (Gemma 2 and 3): "<start_of_turn>" role "\n" content-trimmed "<end_of_turn>\n" per
//    message, the assistant's role named "model", a leading system message's content joined to
//    the first turn's ("system\n\nuser"); then "<start_of_turn>model\n". Its leading
//    "<bos>" is the BOS token, as Llama 3's. (The template's check that roles alternate is not
//    enforced.)
// The rendered text contains special-token text: encode it with parse_special.
//
// Thread-safety: pure functions.
#ifndef BATON_ENGINE_CHAT_TEMPLATE_H_
#define BATON_ENGINE_CHAT_TEMPLATE_H_

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace baton::engine {

enum class ChatTemplateKind { kChatML, kLlama3, kGemma };

struct ChatMessage {
  std::string role;  // "system", "user", "assistant", ...
  std::string content;
};

// The default system message of SmolLM2-Instruct's template (the default model).
inline constexpr std::string_view kSmolLM2DefaultSystemPrompt =
    "You are a helpful AI assistant named SmolLM, trained by Hugging Face";

// The family of a Jinja chat template: ChatML when it contains "<|im_start|>", Llama 3 when it
// contains "<|start_header_id|>", Gemma when it contains "<start_of_turn>". INVALID_ARGUMENT,
// saying how to name a template instead, when the template is empty (the model has none) or of
// another family.
absl::StatusOr<ChatTemplateKind> DetectChatTemplate(std::string_view jinja_source);

// "chatml", "llama3" or "gemma"; INVALID_ARGUMENT listing those otherwise.
absl::StatusOr<ChatTemplateKind> ParseChatTemplateName(std::string_view name);
std::string_view ChatTemplateName(ChatTemplateKind kind);

// The default system message a ChatML template injects (the text between a literal
// "<|im_start|>system\n" and "<|im_end|>" in the template, string escapes undone); "" when none.
std::string ChatTemplateDefaultSystem(std::string_view jinja_source);

// Renders `messages`. `default_system` (ChatML only) is rendered as a system message before the
// first message when that is not a system message and `default_system` is not empty; the default
// is SmolLM2's, so pass ChatTemplateDefaultSystem(template) for other ChatML models. Llama 3 and
// Gemma ignore it (their templates inject none).
std::string ApplyChatTemplate(
    ChatTemplateKind kind, const std::vector<ChatMessage>& messages, bool add_generation_prompt,
    const std::string& default_system = std::string(kSmolLM2DefaultSystemPrompt));

}  // namespace baton::engine

#endif  // BATON_ENGINE_CHAT_TEMPLATE_H_
