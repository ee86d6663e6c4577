#include "engine/chat_template.h"

#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "engine/unicode.h"

namespace baton::engine {
namespace {

absl::string_view Sv(std::string_view s) { return absl::string_view(s.data(), s.size()); }

constexpr std::string_view kNameHint = "name one instead: chatml, llama3 or gemma";

// Python's str.isspace(), which Jinja's trim filter strips.
bool IsPythonSpace(uint32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 ||
         c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
         c == 0x205F || c == 0x3000;
}

// The code point of the well-formed sequence at the start of `s`, or -1 when it is not one.
int64_t LeadingCodePoint(std::string_view s, size_t* length) {
  if (unicode::ScanUtf8(s, length) != unicode::Utf8Scan::kValid) return -1;
  std::vector<uint32_t> cpt;
  unicode::DecodeUtf8Lenient(s.substr(0, *length), &cpt);
  return cpt.empty() ? -1 : cpt[0];
}

// Jinja's `| trim`: Python's str.strip().
std::string_view Trim(std::string_view s) {
  // Forward scan, remembering where the last non-space character ends.
  size_t begin = std::string_view::npos;
  size_t end = 0;
  for (size_t i = 0; i < s.size();) {
    size_t length = 1;
    const int64_t c = LeadingCodePoint(s.substr(i), &length);
    if (length == 0) length = 1;
    if (c < 0 || !IsPythonSpace(static_cast<uint32_t>(c))) {
      if (begin == std::string_view::npos) begin = i;
      end = i + length;
    }
    i += length;
  }
  return begin == std::string_view::npos ? std::string_view() : s.substr(begin, end - begin);
}

// Undoes the escapes of a Jinja string literal.
std::string Unescape(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '\\' || i + 1 == s.size()) {
      out.push_back(s[i]);
      continue;
    }
    const char c = s[++i];
    switch (c) {
      case 'n':
        out.push_back('\n');
        break;
      case 't':
        out.push_back('\t');
        break;
      case 'r':
        out.push_back('\r');
        break;
      default:
        out.push_back(c);
        break;  // \\ \' \"
    }
  }
  return out;
}

}  // namespace

absl::StatusOr<ChatTemplateKind> DetectChatTemplate(std::string_view jinja_source) {
  if (jinja_source.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("the model has no chat template (tokenizer.chat_template); ", Sv(kNameHint)));
  }
  if (jinja_source.find("<|im_start|>") != std::string_view::npos) return ChatTemplateKind::kChatML;
  if (jinja_source.find("<|start_header_id|>") != std::string_view::npos) {
    return ChatTemplateKind::kLlama3;
  }
  if (jinja_source.find("<start_of_turn>") != std::string_view::npos) {
    return ChatTemplateKind::kGemma;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unsupported chat template (none of ChatML's <|im_start|>, Llama 3's "
                   "<|start_header_id|> and Gemma's <start_of_turn> appears in "
                   "tokenizer.chat_template); ",
                   Sv(kNameHint)));
}

absl::StatusOr<ChatTemplateKind> ParseChatTemplateName(std::string_view name) {
  if (name == "chatml") return ChatTemplateKind::kChatML;
  if (name == "llama3") return ChatTemplateKind::kLlama3;
  if (name == "gemma") return ChatTemplateKind::kGemma;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown chat template '", Sv(name), "'; known: chatml, llama3, gemma"));
}

std::string_view ChatTemplateName(ChatTemplateKind kind) {
  switch (kind) {
    case ChatTemplateKind::kChatML:
      return "chatml";
    case ChatTemplateKind::kLlama3:
      return "llama3";
    case ChatTemplateKind::kGemma:
      return "gemma";
  }
  return "unknown";
}

std::string ChatTemplateDefaultSystem(std::string_view jinja_source) {
  constexpr std::string_view kStart = "<|im_start|>system";
  constexpr std::string_view kEnd = "<|im_end|>";
  for (size_t pos = jinja_source.find(kStart); pos != std::string_view::npos;
       pos = jinja_source.find(kStart, pos + 1)) {
    std::string_view rest = jinja_source.substr(pos + kStart.size());
    if (rest.substr(0, 1) == "\n") {
      rest.remove_prefix(1);
    } else if (rest.substr(0, 2) == "\\n") {
      rest.remove_prefix(2);
    } else {
      continue;
    }
    const size_t end = rest.find(kEnd);
    if (end == std::string_view::npos) continue;
    const std::string_view body = rest.substr(0, end);
    // A literal message: the text must not leave the string literal.
    if (body.find_first_of("'\"{}") != std::string_view::npos) continue;
    return Unescape(body);
  }
  return "";
}

std::string ApplyChatTemplate(ChatTemplateKind kind, const std::vector<ChatMessage>& messages,
                              bool add_generation_prompt, const std::string& default_system) {
  std::string out;
  switch (kind) {
    case ChatTemplateKind::kChatML:
      if (!messages.empty() && messages[0].role != "system" && !default_system.empty()) {
        absl::StrAppend(&out, "<|im_start|>system\n", default_system, "<|im_end|>\n");
      }
      for (const ChatMessage& m : messages) {
        absl::StrAppend(&out, "<|im_start|>", m.role, "\n", m.content, "<|im_end|>\n");
      }
      if (add_generation_prompt) out += "<|im_start|>assistant\n";
      break;
    case ChatTemplateKind::kLlama3:
      for (const ChatMessage& m : messages) {
        absl::StrAppend(&out, "<|start_header_id|>", m.role, "<|end_header_id|>\n\n",
                        Sv(Trim(m.content)), "<|eot_id|>");
      }
      if (add_generation_prompt) out += "<|start_header_id|>assistant<|end_header_id|>\n\n";
      break;
    case ChatTemplateKind::kGemma: {
      const bool system_first = !messages.empty() && messages[0].role == "system";
      for (size_t i = system_first ? 1 : 0; i < messages.size(); ++i) {
        const ChatMessage& m = messages[i];
        const bool first_turn = i == (system_first ? 1u : 0u);
        absl::StrAppend(&out, "<start_of_turn>", m.role == "assistant" ? "model" : m.role, "\n",
                        first_turn && system_first ? messages[0].content + "\n\n" : "",
                        Sv(Trim(m.content)), "<end_of_turn>\n");
      }
      if (add_generation_prompt) out += "<start_of_turn>model\n";
      break;
    }
  }
  return out;
}

}  // namespace baton::engine
