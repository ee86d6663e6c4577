// Text <-> token ids, matching llama.cpp's tokenizer exactly for the supported models.
//
// Byte-level BPE (gpt2 model) with the pre-tokenizer regexes of gpt-2, llama3/llama-bpe, qwen2,
// smollm/starcoder; SentencePiece BPE (llama model) with byte fallback. Special and control tokens
// in the text are recognized only when EncodeOptions::parse_special is set. Invalid UTF-8 input is
// handled as llama.cpp does (each invalid byte becomes U+FFFD) and never fails.
//
// Thread-safety: immutable after Create(); Encode/Decode are safe from any thread.
#ifndef BATON_ENGINE_TOKENIZER_H_
#define BATON_ENGINE_TOKENIZER_H_

#include <memory>
#include <string>
#include <string_view>
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
  virtual ~Tokenizer() = default;

  virtual std::vector<TokenId> Encode(std::string_view text, const EncodeOptions& options) const = 0;

  // The bytes of one token as it appears in text (byte-level and SentencePiece escapes undone).
  // Control tokens give "" unless `render_special`. May be a partial UTF-8 sequence.
  virtual std::string TokenToPiece(TokenId id, bool render_special = false) const = 0;

  // Concatenated pieces; SentencePiece's leading space after BOS is removed as llama.cpp does.
  std::string Decode(const std::vector<TokenId>& ids, bool render_special = false) const;

  const Vocab& vocab() const { return vocab_; }
  // Whether generation should stop at this token (EOS, EOT, or another end-of-generation token).
  bool IsEndOfGeneration(TokenId id) const;

 protected:
  explicit Tokenizer(Vocab vocab) : vocab_(std::move(vocab)) {}
  Vocab vocab_;
};

// Streaming detokenizer: feed token ids one at a time, get text that is always complete UTF-8.
// Bytes of an incomplete sequence are held back until it completes; Flush() returns what is left,
// with invalid sequences replaced by U+FFFD. Thread-compatible (one per stream).
class IncrementalDetokenizer {
 public:
  explicit IncrementalDetokenizer(const Tokenizer& tokenizer) : tokenizer_(tokenizer) {}
  std::string Add(TokenId id);
  std::string Flush();

 private:
  const Tokenizer& tokenizer_;
  std::string pending_;
  bool first_ = true;
};

}  // namespace baton::engine

#endif  // BATON_ENGINE_TOKENIZER_H_
