#include "engine/prompt_encoder.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "engine/unicode.h"

namespace baton::engine {
namespace {

using Json = nlohmann::ordered_json;

// The text a special token stands for in a template ("" when the vocabulary has none).
std::string SpecialText(const Tokenizer& tokenizer, TokenId id) {
  return id == kNoToken ? "" : tokenizer.TokenToPiece(id, /*render_special=*/true);
}

bool HasContent(const Json& message) {
  auto content = message.find("content");
  if (content == message.end()) return false;
  if (content->is_string()) return !content->get_ref<const std::string&>().empty();
  return content->is_array() && !content->empty();
}

absl::Status CheckMessages(const Json& messages) {
  if (!messages.is_array() || messages.empty()) {
    return absl::InvalidArgumentError("prompt is empty: chat has no messages");
  }
  for (size_t i = 0; i < messages.size(); ++i) {
    const Json& m = messages[i];
    if (!m.is_object()) {
      return absl::InvalidArgumentError(absl::StrCat("chat message ", i, " is not an object"));
    }
    auto role = m.find("role");
    if (role == m.end() || !role->is_string() || role->get_ref<const std::string&>().empty()) {
      return absl::InvalidArgumentError(absl::StrCat("chat message ", i, " has no role"));
    }
    // Only an assistant turn may be empty (a model's earlier answer, or one of tool calls only).
    const std::string& role_name = role->get_ref<const std::string&>();
    if (role_name != "assistant" && !HasContent(m)) {
      return absl::InvalidArgumentError(
          absl::StrCat("chat message ", i, " (", role_name, ") has no content"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ChatTemplate> CompileChatTemplate(const Tokenizer& tokenizer,
                                                 std::string_view source) {
  return ChatTemplate::Compile(source, SpecialText(tokenizer, tokenizer.vocab().bos_id),
                               SpecialText(tokenizer, tokenizer.vocab().eos_id));
}

ChatTemplateInput TextChat(absl::Span<const ChatMessage> messages) {
  ChatTemplateInput input;
  for (const ChatMessage& m : messages) {
    input.messages.push_back({{"role", m.role}, {"content", m.content}});
  }
  return input;
}

PromptEncoder::PromptEncoder(const Tokenizer* tokenizer,
                             const absl::StatusOr<std::string>& chat_template)
    : tokenizer_(*tokenizer),
      chat_template_(chat_template.ok() ? CompileChatTemplate(*tokenizer, *chat_template)
                                        : absl::StatusOr<ChatTemplate>(chat_template.status())) {}

std::vector<TokenId> PromptEncoder::Encode(std::string_view text) const {
  return tokenizer_.Encode(text, {.add_bos = tokenizer_.vocab().add_bos, .parse_special = true});
}

absl::StatusOr<std::vector<TokenId>> PromptEncoder::EncodeText(std::string_view text) const {
  if (text.empty()) return absl::InvalidArgumentError("prompt is empty");
  if (!unicode::IsValidUtf8(text)) return absl::InvalidArgumentError("prompt is not valid UTF-8");
  return Encode(text);
}

absl::StatusOr<std::string> PromptEncoder::RenderChat(const ChatTemplateInput& chat) const {
  if (absl::Status checked = CheckMessages(chat.messages); !checked.ok()) return checked;
  // The model's template is missing or broken: this request cannot be served as asked.
  if (!chat_template_.ok()) {
    return absl::InvalidArgumentError(chat_template_.status().message());
  }
  absl::StatusOr<std::string> text = chat_template_->Render(chat);
  if (!text.ok()) return text.status();
  const std::string& bos = chat_template_->bos_token();
  if (tokenizer_.vocab().add_bos && !bos.empty() && absl::StartsWith(*text, bos)) {
    text->erase(0, bos.size());
  }
  return text;
}

absl::StatusOr<std::vector<TokenId>> PromptEncoder::EncodeChat(
    const ChatTemplateInput& chat) const {
  absl::StatusOr<std::string> text = RenderChat(chat);
  if (!text.ok()) return text.status();
  return Encode(*text);
}

}  // namespace baton::engine
