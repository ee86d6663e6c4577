#include "engine/tokenizer_pre.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <cctype>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "engine/unicode.h"

namespace baton::engine {
namespace {

absl::string_view Sv(std::string_view s) { return absl::string_view(s.data(), s.size()); }

struct NamedKind {
  std::string_view name;
  PreTokenizerKind kind;
};

// tokenizer.ggml.pre values whose splitting (and merge handling) llama.cpp treats like one of ours.
// clang-format off
constexpr NamedKind kNames[] = {
    {"default", PreTokenizerKind::kDefault},
    {"gpt-2", PreTokenizerKind::kGpt2},
    {"phi-2", PreTokenizerKind::kGpt2},
    {"mpt", PreTokenizerKind::kGpt2},
    {"olmo", PreTokenizerKind::kGpt2},
    {"jais", PreTokenizerKind::kGpt2},
    {"llama3", PreTokenizerKind::kLlama3},
    {"llama-v3", PreTokenizerKind::kLlama3},
    {"llama-bpe", PreTokenizerKind::kLlama3},
    {"falcon3", PreTokenizerKind::kLlama3},
    {"qwen2", PreTokenizerKind::kQwen2},
    {"deepseek-r1-qwen", PreTokenizerKind::kQwen2},
    {"stablelm2", PreTokenizerKind::kQwen2},
    {"starcoder", PreTokenizerKind::kStarCoder},
    {"smollm", PreTokenizerKind::kStarCoder},
    {"refact", PreTokenizerKind::kStarCoder},
    {"command-r", PreTokenizerKind::kStarCoder},
    {"codeshell", PreTokenizerKind::kStarCoder},
    {"exaone", PreTokenizerKind::kStarCoder},
    {"minerva-7b", PreTokenizerKind::kStarCoder},
    {"gpt-4o", PreTokenizerKind::kGpt4o},
    {"llama4", PreTokenizerKind::kGpt4o},
};
// clang-format on

// The Unicode White_Space code points, for use inside a character class (llama.cpp's \s).
constexpr std::string_view kWhitespaceClass =
    R"(\t-\r\x{20}\x{85}\x{A0}\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}\x{202F}\x{205F}\x{3000})";

// Patterns in llama.cpp's notation; WS stands for kWhitespaceClass. \s+(?!\S) is spelled
// [WS]+(?![^WS]) with the negation written out, and the gpt-2 pattern ends with the \s+ alternative
// that llama.cpp's hand-written matcher applies.
constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^WS\p{L}\p{N}]+|[WS]+(?![^WS])|[WS]+)";
constexpr std::string_view kLlama3Pattern =
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD]))"
    R"(|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^WS\p{L}\p{N}]+[\r\n]*)"
    R"(|[WS]*[\r\n]+|[WS]+(?![^WS])|[WS]+)";
constexpr std::string_view kQwen2Pattern =
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD]))"
    R"(|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^WS\p{L}\p{N}]+[\r\n]*)"
    R"(|[WS]*[\r\n]+|[WS]+(?![^WS])|[WS]+)";

// o200k's regex as llama.cpp rewrites it for its engine: an upper-case letter is a letter that
// is not a-z, a lower-case one a letter that is not A-Z (so a letter outside ASCII is both);
// letter runs take an optional trailing contraction; digits in threes.
constexpr std::string_view kGpt4oPattern =
    R"([^\r\n\p{L}\p{N}]?(?:(?=[\p{L}])[^a-z])*(?:(?=[\p{L}])[^A-Z])+)"
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?)"
    R"(|[^\r\n\p{L}\p{N}]?(?:(?=[\p{L}])[^a-z])+(?:(?=[\p{L}])[^A-Z])*)"
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?)"
    R"(|\p{N}{1,3}| ?[^WS\p{L}\p{N}]+[\r\n/]*|[WS]*[\r\n]+|[WS]+(?![^WS])|[WS]+)";

std::vector<std::string_view> PatternsFor(PreTokenizerKind kind) {
  switch (kind) {
    case PreTokenizerKind::kDefault:
      return {R"([\p{P}\$\+<=>\^~\|]+)", kGpt2Pattern, R"(\p{N}+)", R"([0-9][0-9][0-9])"};
    case PreTokenizerKind::kGpt2:
      return {kGpt2Pattern};
    case PreTokenizerKind::kLlama3:
      return {kLlama3Pattern};
    case PreTokenizerKind::kQwen2:
      return {kQwen2Pattern};
    case PreTokenizerKind::kStarCoder:
      return {R"(\p{N})", kGpt2Pattern};
    case PreTokenizerKind::kGpt4o:
      return {kGpt4oPattern};
  }
  return {};
}

}  // namespace

absl::StatusOr<PreTokenizerKind> PreTokenizerKindFromName(std::string_view name) {
  if (name.empty()) return PreTokenizerKind::kDefault;
  for (const NamedKind& n : kNames) {
    if (n.name == name) return n.kind;
  }
  std::string supported;
  for (const NamedKind& n : kNames) {
    absl::StrAppend(&supported, supported.empty() ? "" : ", ", Sv(n.name));
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown pre-tokenizer '", Sv(name), "' in tokenizer.ggml.pre; supported: ", supported));
}

bool PreTokenizerIgnoresMerges(PreTokenizerKind kind) { return kind == PreTokenizerKind::kLlama3; }

absl::StatusOr<std::string> PatternFromOnigurumaRegex(std::string_view regex) {
  const std::string ws(kWhitespaceClass);
  std::string out;
  out.reserve(regex.size() + 64);
  bool in_class = false;
  for (size_t i = 0; i < regex.size(); ++i) {
    const char c = regex[i];
    if (c == '\\' && i + 1 < regex.size()) {
      const char next = regex[++i];
      if (next == 's') {
        out += in_class ? ws : "[" + ws + "]";
      } else if (next == 'S') {
        if (in_class) {
          return absl::InvalidArgumentError(absl::StrCat(
              "split regex '", Sv(regex), "': \\S inside a character class is not supported"));
        }
        out += "[^" + ws + "]";
      } else {
        out += c;
        out += next;
      }
      continue;
    }
    if (c == '[' && !in_class) {
      in_class = true;
      out += c;
      // A ']' right after '[' or '[^' is a literal member.
      if (i + 1 < regex.size() && regex[i + 1] == '^') out += regex[++i];
      if (i + 1 < regex.size() && regex[i + 1] == ']') out += regex[++i];
      continue;
    }
    if (c == ']' && in_class) in_class = false;
    out += c;
  }
  return out;
}

std::string PatternFromLiteral(std::string_view text) {
  std::string out;
  for (char c : text) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x80 && !std::isalnum(u)) out += '\\';
    out += c;
  }
  return out;
}

absl::StatusOr<std::unique_ptr<PreTokenizer>> PreTokenizer::Create(PreTokenizerKind kind) {
  std::vector<SplitRule> rules;
  for (std::string_view pattern : PatternsFor(kind)) {
    rules.push_back(
        {absl::StrReplaceAll(Sv(pattern), {{"WS", Sv(kWhitespaceClass)}}), SplitBehavior::kIsolated});
  }
  absl::StatusOr<std::unique_ptr<PreTokenizer>> pre = Create(rules);
  if (!pre.ok()) return absl::InternalError(pre.status().message());
  return pre;
}

absl::StatusOr<std::unique_ptr<PreTokenizer>> PreTokenizer::Create(
    const std::vector<SplitRule>& rules) {
  std::unique_ptr<PreTokenizer> pre(new PreTokenizer());
  for (const SplitRule& rule : rules) {
    int error_code = 0;
    PCRE2_SIZE error_offset = 0;
    pcre2_code* code =
        pcre2_compile(reinterpret_cast<PCRE2_SPTR>(rule.pattern.data()), rule.pattern.size(),
                      PCRE2_UTF | PCRE2_UCP, &error_code, &error_offset, nullptr);
    if (code == nullptr) {
      PCRE2_UCHAR message[256];
      pcre2_get_error_message(error_code, message, sizeof(message));
      return absl::InvalidArgumentError(
          absl::StrCat("pre-tokenizer regex '", rule.pattern, "' does not compile at offset ",
                       error_offset, ": ", reinterpret_cast<const char*>(message)));
    }
    // JIT is an optimisation only: without it (unsupported platform) matching still works.
    pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
    pre->rules_.push_back({code, rule.behavior});
  }
  return pre;
}

PreTokenizer::~PreTokenizer() {
  for (const CompiledRule& rule : rules_) pcre2_code_free(rule.code);
}

namespace {

// Adds a piece that split `rule` made: a match of its pattern or the text between two matches.
// Pieces come in order and are adjacent.
class PieceSink {
 public:
  PieceSink(SplitBehavior behavior, std::vector<PreTokenizer::Range>* out)
      : behavior_(behavior), out_(out) {}

  void Add(size_t begin, size_t end, bool is_match) {
    switch (behavior_) {
      case SplitBehavior::kIsolated:
        out_->emplace_back(begin, end);
        return;
      case SplitBehavior::kMergedWithPrevious:
        // A match joins the text before it, unless that already took a match.
        if (is_match && last_was_text_) {
          out_->back().second = end;
        } else {
          out_->emplace_back(begin, end);
        }
        last_was_text_ = !is_match;
        return;
      case SplitBehavior::kMergedWithNext:
        // A match waits for the text after it; a match after a match stands alone.
        if (has_pending_) {
          out_->emplace_back(pending_begin_, is_match ? begin : end);
          has_pending_ = false;
          if (!is_match) return;
        }
        if (is_match) {
          has_pending_ = true;
          pending_begin_ = begin;
        } else {
          out_->emplace_back(begin, end);
        }
        return;
    }
  }

  // Ends one piece of the previous rule's output: nothing merges across it.
  void Finish(size_t end) {
    if (has_pending_) out_->emplace_back(pending_begin_, end);
    has_pending_ = false;
    last_was_text_ = false;
  }

 private:
  SplitBehavior behavior_;
  std::vector<PreTokenizer::Range>* out_;
  bool last_was_text_ = false;
  bool has_pending_ = false;
  size_t pending_begin_ = 0;
};

}  // namespace

void PreTokenizer::Split(std::string_view text, std::vector<Range>* words) const {
  if (text.empty()) return;
  std::vector<Range> pieces = {{0, text.size()}};
  std::vector<Range> next;
  for (const CompiledRule& rule : rules_) {
    next.clear();
    next.reserve(pieces.size() * 2);
    PieceSink sink(rule.behavior, &next);
    pcre2_match_data* match = pcre2_match_data_create_from_pattern(rule.code, nullptr);
    for (const auto& [begin, end] : pieces) {
      // The piece is the whole subject, so lookaheads stop at its end as in llama.cpp.
      const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data() + begin);
      const size_t length = end - begin;
      size_t done = 0;  // end of the last match
      size_t from = 0;  // where the next search starts
      while (match != nullptr && from < length) {
        const int rc =
            pcre2_match(rule.code, subject, length, from, PCRE2_NO_UTF_CHECK, match, nullptr);
        if (rc < 0) break;  // no further match (or a resource limit): the rest is one piece
        const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(match);
        const size_t match_begin = ovector[0];
        const size_t match_end = ovector[1];
        if (match_end <= match_begin) {
          // An empty match (SplitRule forbids them): step over one code point.
          if (match_begin >= length) break;
          from = match_begin + unicode::Utf8LengthFromLeadByte(subject[match_begin]);
          continue;
        }
        if (match_begin > done) sink.Add(begin + done, begin + match_begin, false);
        sink.Add(begin + match_begin, begin + match_end, true);
        done = from = match_end;
      }
      if (done < length) sink.Add(begin + done, end, false);
      sink.Finish(end);
    }
    pcre2_match_data_free(match);
    pieces.swap(next);
  }
  words->insert(words->end(), pieces.begin(), pieces.end());
}

}  // namespace baton::engine
