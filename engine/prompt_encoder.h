// What a client sends — plain text or a chat — into the prompt's token ids, the way llama.cpp
// does: BOS as the model says, special-token text recognized; a chat rendered with the chat
// template first (the model's own or the one named), BOS added once: a rendering that starts with
// the BOS text has it taken off when the tokenizer adds BOS itself. The one intake rule for every
// front end (the router, `baton generate`).
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

// A message of plain text (what `baton generate --chat` and the gRPC API's ChatMessage carry).
struct ChatMessage {
  std::string role;  // "system", "user", "assistant", "tool", ...
  std::string content;
};

// `messages` as a template's input, with the generation prompt asked for.
ChatTemplateInput TextChat(absl::Span<const ChatMessage> messages);

// `source` compiled with the texts of the tokenizer's BOS and EOS tokens as bos_token and
// eos_token ("" where it has none).
absl::StatusOr<ChatTemplate> CompileChatTemplate(const Tokenizer& tokenizer,
                                                 std::string_view source);

class PromptEncoder {
 public:
  // `chat_template` is the template's source (ChatTemplateSource) or why there is none; chats are
  // refused with that reason, or with the template's parse error, when it is not usable.
  PromptEncoder(const Tokenizer* tokenizer, const absl::StatusOr<std::string>& chat_template);

  // INVALID_ARGUMENT when the text is empty or not valid UTF-8.
  absl::StatusOr<std::vector<TokenId>> EncodeText(std::string_view text) const;
  // INVALID_ARGUMENT when there is no message, a message is not an object or has no role, a
  // message other than an assistant's has no content, a text is not valid UTF-8 (each naming the
  // message's index), or the template fails on the conversation ("chat template: ..." with its
  // error); INVALID_ARGUMENT with the reason the model has no usable template otherwise.
  absl::StatusOr<std::vector<TokenId>> EncodeChat(const ChatTemplateInput& chat) const;
  // The rendered prompt text EncodeChat encodes (its BOS text taken off where the tokenizer adds
  // BOS); the same errors.
  absl::StatusOr<std::string> RenderChat(const ChatTemplateInput& chat) const;

  // The compiled template, or why chats cannot be encoded.
  const absl::StatusOr<ChatTemplate>& chat_template() const { return chat_template_; }

 private:
  std::vector<TokenId> Encode(std::string_view text) const;

  const Tokenizer& tokenizer_;
  absl::StatusOr<ChatTemplate> chat_template_;
};

}  // namespace baton::engine

#endif  // BATON_ENGINE_PROMPT_ENCODER_H_
