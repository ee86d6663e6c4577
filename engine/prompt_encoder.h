// What a client sends — plain text or a chat — into the prompt's token ids, the way llama.cpp
// does: BOS as the model says, special-token text recognized; a chat rendered with the model's chat
// template first. The one intake rule for every front end (the router, `baton generate`).
//
// Thread-safety: immutable after construction; share it freely. The tokenizer must outlive it.
#ifndef BATON_ENGINE_PROMPT_ENCODER_H_
#define BATON_ENGINE_PROMPT_ENCODER_H_

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "engine/chat_template.h"
#include "engine/tokenizer.h"

namespace baton::engine {

class PromptEncoder {
 public:
  // The chat template is the one the model's metadata names (DetectChatTemplate), or
  // `template_name` ("chatml", "llama3", "gemma") when that is not empty.
  explicit PromptEncoder(const Tokenizer* tokenizer, std::string_view template_name = "");

  // INVALID_ARGUMENT when the text is empty or not valid UTF-8.
  absl::StatusOr<std::vector<TokenId>> EncodeText(std::string_view text) const;
  // INVALID_ARGUMENT when there is no message, a message has no role, a message other than an
  // assistant's has no content, a role or content is not valid UTF-8 (each naming the message's
  // index), or the model has no usable chat template.
  absl::StatusOr<std::vector<TokenId>> EncodeChat(absl::Span<const ChatMessage> messages) const;

  // The template family, or why chats cannot be encoded.
  const absl::StatusOr<ChatTemplateKind>& chat_template() const { return chat_template_; }

 private:
  std::vector<TokenId> Encode(std::string_view text) const;

  const Tokenizer& tokenizer_;
  absl::StatusOr<ChatTemplateKind> chat_template_;
  std::string default_system_;  // what a ChatML template injects; "" when none
};

}  // namespace baton::engine

#endif  // BATON_ENGINE_PROMPT_ENCODER_H_
