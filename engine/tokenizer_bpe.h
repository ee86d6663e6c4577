// BPE with merges for one piece of plain text. Byte-level BPE (tokenizer.ggml.model = "gpt2", or a
// tokenizer.json with ByteLevel) runs as llama.cpp's llm_tokenizer_bpe_session does:
//  1. decode the text leniently (each invalid byte becomes U+FFFD), re-encode it as UTF-8;
//  2. split it into words with the pre-tokenizer;
//  3. map every byte of a word to the GPT-2 byte alphabet;
//  4. merge adjacent symbols, lowest merge rank first (leftmost on ties), starting from single
//     characters; with ignore_merges (llama3) a word that is a token is taken whole;
//  5. look up each final symbol; one that is not a token falls back to its single bytes that are.
// BPE over characters (kBytePairChars, Hugging Face's BPE model without ByteLevel) skips step 3,
// and a final symbol that is not a token (always a single character: merges only make tokens)
// becomes its <0xXX> byte tokens with byte_fallback, else the unknown token (once for a run of
// them with fuse_unk). The text must be normalized (NormalizeText), hence well-formed UTF-8.
//
// Thread-safety: immutable after Create(); Encode() is safe from any thread.
#ifndef BATON_ENGINE_TOKENIZER_BPE_H_
#define BATON_ENGINE_TOKENIZER_BPE_H_

#include <array>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "engine/tokenizer_pre.h"
#include "engine/vocab.h"
#include "engine/vocab_index.h"

namespace baton::engine {

class BpeEncoder {
 public:
  // `vocab` and `index` must outlive the encoder (its merge ranks view into vocab.merges).
  static absl::StatusOr<std::unique_ptr<BpeEncoder>> Create(const Vocab& vocab,
                                                            const VocabIndex* index);

  // Appends the ids of `text` (plain text: special tokens are already split off) to `out`.
  void Encode(std::string_view text, std::vector<TokenId>* out) const;

 private:
  using MergeKey = std::pair<std::string_view, std::string_view>;
  struct MergeHash {
    using is_transparent = void;
    size_t operator()(MergeKey key) const;
  };
  struct MergeEq {
    using is_transparent = void;
    bool operator()(MergeKey a, MergeKey b) const { return a == b; }
  };

  BpeEncoder() = default;
  // Appends the ids of one word (byte-level encoded when byte_level_).
  void EncodeWord(std::string_view word, std::vector<TokenId>* out) const;
  // Appends the ids standing for a character that is not a token (kBytePairChars); the word's
  // ids start at out[word_start].
  void AppendUnknown(std::string_view character, size_t word_start,
                     std::vector<TokenId>* out) const;
  int32_t Rank(std::string_view left, std::string_view right) const;

  const VocabIndex* index_ = nullptr;
  std::unique_ptr<PreTokenizer> pre_;
  bool ignore_merges_ = false;
  bool byte_level_ = true;
  bool byte_fallback_ = false;
  bool fuse_unk_ = false;
  TokenId unk_id_ = kNoToken;
  std::array<TokenId, 256> byte_tokens_{};  // <0xXX> ids, with byte_fallback_
  // (left, right) -> rank; the strings are the halves of the vocabulary's merges.
  absl::flat_hash_map<MergeKey, int32_t, MergeHash, MergeEq> ranks_;
};

}  // namespace baton::engine

#endif  // BATON_ENGINE_TOKENIZER_BPE_H_
