#include "engine/prompt_encoder.h"

#include "absl/strings/str_cat.h"
#include "engine/unicode.h"

namespace baton::engine {

PromptEncoder::PromptEncoder(const Tokenizer* tokenizer, std::string_view template_name)
    : tokenizer_(*tokenizer),
      chat_template_(template_name.empty()
                         ? DetectChatTemplate(tokenizer->vocab().chat_template)
                         : ParseChatTemplateName(template_name)),
      default_system_(ChatTemplateDefaultSystem(tokenizer->vocab().chat_template)) {}

std::vector<TokenId> PromptEncoder::Encode(std::string_view text) const {
  return tokenizer_.Encode(text, {.add_bos = tokenizer_.vocab().add_bos, .parse_special = true});
}

absl::StatusOr<std::vector<TokenId>> PromptEncoder::EncodeText(std::string_view text) const {
  if (text.empty()) return absl::InvalidArgumentError("prompt is empty");
  if (!unicode::IsValidUtf8(text)) return absl::InvalidArgumentError("prompt is not valid UTF-8");
  return Encode(text);
}

absl::StatusOr<std::vector<TokenId>> PromptEncoder::EncodeChat(
    absl::Span<const ChatMessage> messages) const {
  if (messages.empty()) return absl::InvalidArgumentError("prompt is empty: chat has no messages");
  for (size_t i = 0; i < messages.size(); ++i) {
    if (messages[i].role.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("chat message ", i, " has no role"));
    }
    if (!unicode::IsValidUtf8(messages[i].role) || !unicode::IsValidUtf8(messages[i].content)) {
      return absl::InvalidArgumentError(absl::StrCat("chat message ", i, " is not valid UTF-8"));
    }
    // Only an assistant turn may be empty (a model's earlier answer can be).
    if (messages[i].content.empty() && messages[i].role != "assistant") {
      return absl::InvalidArgumentError(
          absl::StrCat("chat message ", i, " (", messages[i].role, ") has no content"));
    }
  }
  if (!chat_template_.ok()) return chat_template_.status();
  return Encode(ApplyChatTemplate(*chat_template_,
                                  std::vector<ChatMessage>(messages.begin(), messages.end()),
                                  /*add_generation_prompt=*/true, default_system_));
}

}  // namespace baton::engine
