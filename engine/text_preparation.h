// How a Hugging Face tokenizer.json prepares text before its BPE model runs: the normalizer and
// the pre-tokenizer's split rules, read by tokenizer_json.h. A GGUF vocabulary has none of this:
// its tokenizer.ggml.pre name selects llama.cpp's handling instead (tokenizer_pre.h).
//
// Thread-safety: plain value types; NormalizeText is a pure function.
#ifndef BATON_ENGINE_TEXT_PREPARATION_H_
#define BATON_ENGINE_TEXT_PREPARATION_H_

#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace baton::engine {

// What a split keeps of each match of its pattern (Hugging Face's SplitDelimiterBehavior).
enum class SplitBehavior {
  kIsolated,            // the match is a word of its own
  kMergedWithPrevious,  // the match ends the word before it
  kMergedWithNext,      // the match starts the word after it
};

// One split of the pre-tokenizer: `pattern` is a PCRE2 pattern (UTF, Unicode properties) that
// never matches the empty string.
struct SplitRule {
  std::string pattern;
  SplitBehavior behavior = SplitBehavior::kIsolated;
};

struct TextPreparation {
  // Normalizer, applied in this order to each piece of text between added tokens.
  bool nfc = false;                                          // NFC
  std::vector<std::pair<std::string, std::string>> replace;  // Replace: (from, to) literal strings
  std::string prepend;                                       // Prepend: before a non-empty piece
  // Pre-tokenizer: each rule splits every word the previous rules left.
  std::vector<SplitRule> splits;
  bool byte_level = false;  // ByteLevel: words mapped to GPT-2's byte alphabet before BPE
  // BPE model options.
  bool ignore_merges = false;  // a word that is a token is taken whole
  bool byte_fallback = false;  // a character that is not a token becomes its <0xXX> tokens
  bool fuse_unk = false;       // consecutive unknown tokens become one
};

// The normalizer of `preparation` applied to `text`. Text that is not well-formed UTF-8 first has
// each ill-formed subsequence replaced by U+FFFD: a Hugging Face tokenizer takes a string, as
// Python's decode(errors="replace") would make one of such bytes.
std::string NormalizeText(const TextPreparation& preparation, std::string_view text);

}  // namespace baton::engine

#endif  // BATON_ENGINE_TEXT_PREPARATION_H_
