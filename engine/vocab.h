// The tokenizer's vocabulary and settings, as a GGUF file (tokenizer.ggml.*, LoadVocab below) or a
// Hugging Face tokenizer.json (tokenizer_json.h) describes them.
//
// Thread-safety: a plain value type.
#ifndef BATON_ENGINE_VOCAB_H_
#define BATON_ENGINE_VOCAB_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/text_preparation.h"

namespace baton::engine {

class GgufFile;

using TokenId = int32_t;
inline constexpr TokenId kNoToken = -1;

enum class TokenizerModel {
  kBytePairGpt2,     // tokenizer.ggml.model = "gpt2": byte-level BPE with merges
  kSentencePiece,    // tokenizer.ggml.model = "llama": SentencePiece BPE with scores, byte fallback
  kBytePairChars,    // tokenizer.json BPE without ByteLevel: merges over characters (Gemma)
};

// GGUF tokenizer.ggml.token_type values (llama.cpp's llama_token_type).
enum class TokenType : int32_t {
  kUndefined = 0,
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,
  kUserDefined = 4,
  kUnused = 5,
  kByte = 6,
};

struct Vocab {
  TokenizerModel model = TokenizerModel::kBytePairGpt2;
  std::string pre;                        // tokenizer.ggml.pre, e.g. "smollm", "llama-bpe", "default"
  std::vector<std::string> tokens;        // [n_vocab] token text (byte-level encoded for gpt2)
  std::vector<float> scores;              // [n_vocab] or empty
  std::vector<TokenType> token_types;     // [n_vocab]; kNormal when the file has none
  std::vector<std::string> merges;        // "left right", in priority order (BPE with merges)
  TokenId bos_id = kNoToken;
  TokenId eos_id = kNoToken;
  TokenId eot_id = kNoToken;              // end of turn (e.g. <|eot_id|>, <|im_end|>) if known
  TokenId unk_id = kNoToken;
  TokenId pad_id = kNoToken;
  bool add_bos = false;
  bool add_eos = false;
  bool add_space_prefix = false;          // SentencePiece: prepend a space to the text
  std::string chat_template;              // tokenizer.chat_template, empty when absent
  // A tokenizer.json's normalizer and pre-tokenizer; none for a GGUF vocabulary, which `pre`
  // describes.
  std::optional<TextPreparation> preparation;

  int32_t size() const { return static_cast<int32_t>(tokens.size()); }
};

// Reads and validates the tokenizer.ggml.* keys of `file`: array lengths agree with the token
// count, special ids are in range, the model and pre-tokenizer are known, token texts are
// distinct. Defaults follow llama.cpp where a key is absent: gpt2 BOS/EOS 11 and no BOS added
// (except llama3-style pre-tokenizers), llama BOS 1, EOS 2, UNK 0, BOS and space prefix added; a
// default id outside the vocabulary means none; eot_id is found by its text (<|eot_id|>,
// <|im_end|>, ...) when the key is absent. As in llama.cpp, an empty token text becomes
// "[EMPTY_<id>]". A negative special id in the file means none. Errors are INVALID_ARGUMENT
// naming the file and the key.
absl::StatusOr<Vocab> LoadVocab(const GgufFile& file);

}  // namespace baton::engine

#endif  // BATON_ENGINE_VOCAB_H_
