// Text <-> token ids, matching llama.cpp's tokenizer exactly for the supported models (GGUF), and
// Hugging Face's `tokenizers` for a tokenizer.json (tokenizer_json.h): its normalizer runs on each
// piece of text between special tokens before the pre-tokenizer.
//
// Byte-level BPE (gpt2 model) with the pre-tokenizer regexes of gpt-2, llama3/llama-bpe, qwen2,
// smollm/starcoder (and llama.cpp's "default"); SentencePiece BPE (llama model) with byte fallback.
// Control and unknown tokens in the text are recognized only when EncodeOptions::parse_special is
// set; user-defined tokens always are, as in llama.cpp. Invalid UTF-8 input never fails: byte-level
// BPE turns each invalid byte into U+FFFD as llama.cpp does; SentencePiece, also as llama.cpp,
// emits the byte tokens of what does not form a token.
//
// Create() applies llama.cpp's load-time adjustments to the vocabulary (see vocab_index.h): the
// end-of-turn token is found by its text when the file names none, and tokens whose text marks the
// end of a turn or of generation become control tokens. vocab() shows the adjusted vocabulary.
//
// Thread-safety: immutable after Create(); Encode/Decode are safe from any thread.
#ifndef BATON_ENGINE_TOKENIZER_H_
#define BATON_ENGINE_TOKENIZER_H_

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/vocab.h"

namespace baton::engine {

struct EncodeOptions {
  bool add_bos = false;        // prepend BOS (callers pass vocab().add_bos for "model default")
  bool add_eos = false;
  bool parse_special = false;  // recognize special/control token text such as <|im_start|>
};

class Tokenizer {
 public:
  static absl::StatusOr<std::unique_ptr<Tokenizer>> Create(Vocab vocab);
  // The tokenizer of the GGUF file at `path` (a vocabulary-only file works), or of the Hugging
  // Face tokenizer.json at `path` (or in the directory `path`, see tokenizer_json.h): the file's
  // or its vocabulary's error otherwise.
  static absl::StatusOr<std::unique_ptr<Tokenizer>> Load(const std::string& path);
  virtual ~Tokenizer() = default;

  virtual std::vector<TokenId> Encode(std::string_view text, const EncodeOptions& options) const = 0;

  // The bytes of one token as it appears in text (byte-level and SentencePiece escapes undone),
  // as llama.cpp's token_to_piece. Control and unknown tokens give "" unless `render_special`;
  // user-defined tokens give their text; an id out of range gives "". May be a partial UTF-8
  // sequence.
  virtual std::string TokenToPiece(TokenId id, bool render_special = false) const = 0;

  // Concatenated pieces. When the vocabulary adds a space prefix (SentencePiece), the leading
  // space of the first token after an optional BOS is removed, so that Decode(Encode(text)) gives
  // text back. No other clean-up (llama.cpp's clean_spaces is not applied). May hold invalid UTF-8
  // when the ids split a character; IncrementalDetokenizer never does.
  std::string Decode(const std::vector<TokenId>& ids, bool render_special = false) const;

  const Vocab& vocab() const { return vocab_; }
  // Whether generation should stop at this token: EOS, EOT, and the other end-of-generation
  // tokens llama.cpp recognizes by their text (<|im_end|>, <|eot_id|>, <|endoftext|>, ...).
  bool IsEndOfGeneration(TokenId id) const;

 protected:
  // `eog_ids`: the end-of-generation tokens, sorted.
  Tokenizer(Vocab vocab, std::vector<TokenId> eog_ids)
      : vocab_(std::move(vocab)), eog_ids_(std::move(eog_ids)) {}
  Vocab vocab_;
  std::vector<TokenId> eog_ids_;
};

// Streaming detokenizer: feed token ids one at a time, get text that is always well-formed UTF-8.
// Bytes of an incomplete sequence are held back until it completes; bytes that can never form a
// character are replaced by U+FFFD (one per maximal ill-formed subpart, as Unicode recommends) as
// soon as that is certain; Flush() returns what is left, an incomplete tail becoming U+FFFD. The
// concatenated output equals Decode() of the same ids when that is valid UTF-8 (the same leading
// space is removed). Thread-compatible (one per stream); the tokenizer must outlive it.
class IncrementalDetokenizer {
 public:
  explicit IncrementalDetokenizer(const Tokenizer& tokenizer, bool render_special = false)
      : tokenizer_(tokenizer), render_special_(render_special) {}
  std::string Add(TokenId id);
  std::string Flush();

 private:
  const Tokenizer& tokenizer_;
  bool render_special_;
  std::string pending_;   // at most the 3 bytes of an incomplete character
  bool started_ = false;  // a token has been added
  bool first_ = true;     // the next token is the first after an optional leading BOS
};

}  // namespace baton::engine

#endif  // BATON_ENGINE_TOKENIZER_H_
