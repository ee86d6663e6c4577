// The pre-tokenizer of byte-level BPE: splits text into the words that merges stay within, with
// the regular expressions llama.cpp uses for each tokenizer.ggml.pre value.
//
// A pre-tokenizer is a chain of split rules (a llama.cpp kind is a chain of isolating regexes; a
// tokenizer.json states its own). Every rule splits each piece left by the previous one at its
// matches, keeping all of the text (see SplitBehavior), so a piece's boundaries also bound
// lookaheads.
// Matching uses PCRE2 in UTF mode with Unicode properties; \s is written out as the Unicode
// White_Space set, which is what llama.cpp's tables call whitespace.
//
// Thread-safety: immutable after Create(); Split() is safe from any thread.
#ifndef BATON_ENGINE_TOKENIZER_PRE_H_
#define BATON_ENGINE_TOKENIZER_PRE_H_

#include <cstddef>
#include <memory>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/text_preparation.h"

struct pcre2_real_code_8;

namespace baton::engine {

enum class PreTokenizerKind {
  kDefault,    // "default" (or absent): llama.cpp's LLAMA_VOCAB_PRE_TYPE_DEFAULT chain
  kGpt2,       // "gpt-2" and aliases
  kLlama3,     // "llama3", "llama-bpe", ...: also whole-word lookup before merging
  kQwen2,      // "qwen2", ...
  kStarCoder,  // "starcoder", "smollm", ...: digits one by one, then the gpt-2 regex
  kGpt4o,      // "gpt-4o", "llama4": o200k's words, cased runs kept apart (gpt-oss, Llama 4)
};

// The kind for a tokenizer.ggml.pre value ("" means "default"); INVALID_ARGUMENT naming the
// supported values when unknown.
absl::StatusOr<PreTokenizerKind> PreTokenizerKindFromName(std::string_view name);

// Whether a word that is itself a token skips the merges (llama.cpp's ignore_merges).
bool PreTokenizerIgnoresMerges(PreTokenizerKind kind);

// A Hugging Face (Oniguruma) split regex as a PCRE2 pattern for SplitRule: \s and \S become the
// Unicode White_Space set and its complement, which is what Oniguruma matches. INVALID_ARGUMENT
// when \S appears inside a character class (not expressible here).
absl::StatusOr<std::string> PatternFromOnigurumaRegex(std::string_view regex);

// A PCRE2 pattern matching `text` literally.
std::string PatternFromLiteral(std::string_view text);

class PreTokenizer {
 public:
  // [begin, end) byte offsets of a word in the text given to Split().
  using Range = std::pair<size_t, size_t>;

  // Compiles the regexes of llama.cpp's chain for `kind` (INTERNAL if PCRE2 rejects one, which
  // would be a bug).
  static absl::StatusOr<std::unique_ptr<PreTokenizer>> Create(PreTokenizerKind kind);
  // Compiles `rules`, applied in order (INVALID_ARGUMENT quoting PCRE2's message for a pattern it
  // rejects). No rules: each text is one word.
  static absl::StatusOr<std::unique_ptr<PreTokenizer>> Create(const std::vector<SplitRule>& rules);
  ~PreTokenizer();
  PreTokenizer(const PreTokenizer&) = delete;
  PreTokenizer& operator=(const PreTokenizer&) = delete;

  // Appends the words of `text`, which must be well-formed UTF-8 (no surrogates), in order. The
  // words are non-empty and together cover the text.
  void Split(std::string_view text, std::vector<Range>* words) const;

 private:
  PreTokenizer() = default;
  struct CompiledRule {
    pcre2_real_code_8* code;
    SplitBehavior behavior;
  };
  std::vector<CompiledRule> rules_;
};

}  // namespace baton::engine

#endif  // BATON_ENGINE_TOKENIZER_PRE_H_
