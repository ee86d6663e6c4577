// SentencePiece BPE (tokenizer.ggml.model = "llama") for one piece of plain text, as llama.cpp's
// llm_tokenizer_spm_session does it: the text (spaces already escaped as U+2581) is cut into UTF-8
// characters by their lead bytes without validation; adjacent symbols whose concatenation is a
// token are merged, highest score first (leftmost on ties); a final symbol that is not a token is
// emitted as byte tokens <0xXX> (or the byte's own token, or <unk> when neither exists).
//
// Thread-safety: immutable after construction; Encode() is safe from any thread.
#ifndef BATON_ENGINE_TOKENIZER_SPM_H_
#define BATON_ENGINE_TOKENIZER_SPM_H_

#include <array>
#include <string_view>
#include <vector>

#include "engine/vocab.h"
#include "engine/vocab_index.h"

namespace baton::engine {

class SpmEncoder {
 public:
  // `index` must outlive the encoder.
  SpmEncoder(const Vocab& vocab, const VocabIndex* index);

  // Appends the ids of `text` to `out`.
  void Encode(std::string_view text, std::vector<TokenId>* out) const;

 private:
  const VocabIndex* index_;
  std::vector<float> scores_;             // [n_vocab], NaN replaced by -inf
  std::array<TokenId, 256> byte_tokens_;  // byte fallback; kNoToken when none
};

}  // namespace baton::engine

#endif  // BATON_ENGINE_TOKENIZER_SPM_H_
