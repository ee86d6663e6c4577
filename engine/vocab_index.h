// Lookup tables that the tokenizer derives from a Vocab, built the way llama.cpp builds them when
// it loads a vocabulary: token attributes (with llama.cpp's detection of end-of-turn, end-of-
// generation and fill-in-the-middle tokens by their text), text -> id, the special tokens to look
// for in text (longest first), and the end-of-generation set.
//
// Thread-safety: VocabIndex is a plain value, immutable once built.
#ifndef BATON_ENGINE_VOCAB_INDEX_H_
#define BATON_ENGINE_VOCAB_INDEX_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/hash/hash.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "engine/vocab.h"

namespace baton::engine {

// llama.cpp's llama_token_attr bits.
enum TokenAttr : uint32_t {
  kTokenAttrUndefined = 0,
  kTokenAttrUnknown = 1u << 0,
  kTokenAttrUnused = 1u << 1,
  kTokenAttrNormal = 1u << 2,
  kTokenAttrControl = 1u << 3,
  kTokenAttrUserDefined = 1u << 4,
  kTokenAttrByte = 1u << 5,
};

// Transparent hashing of token text, so that maps keyed by std::string take std::string_view.
struct TextHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const {
    return absl::Hash<absl::string_view>{}(absl::string_view(s.data(), s.size()));
  }
};
struct TextEq {
  using is_transparent = void;
  bool operator()(std::string_view a, std::string_view b) const { return a == b; }
};
using TextToIdMap = absl::flat_hash_map<std::string, TokenId, TextHash, TextEq>;

struct VocabIndex {
  std::vector<uint32_t> attrs;          // [n_vocab] TokenAttr bits
  TextToIdMap text_to_id;               // every token's text
  std::vector<TokenId> special_tokens;  // control, user-defined and unknown tokens, longest first
  std::vector<TokenId> eog_ids;         // end-of-generation tokens, sorted
};

// Checks that `vocab` is coherent: tokens present, non-empty and distinct; scores and token types
// empty or one per token; special ids kNoToken or in range; a known pre-tokenizer for gpt2; BOS/EOS
// present when they are to be added. INVALID_ARGUMENT naming the problem.
absl::Status ValidateVocab(const Vocab& vocab);

// The end-of-turn token found by its text (<|eot_id|>, <|im_end|>, ...), kNoToken if none.
TokenId FindEndOfTurnByText(const Vocab& vocab);

// Validates `vocab`, then applies llama.cpp's load-time adjustments to it: eot_id found by text
// when unset, and (for a GGUF vocabulary, not a tokenizer.json one, whose added tokens say
// themselves whether they are special) kControl for tokens whose text marks them as end-of-turn,
// end-of-generation or fill-in-the-middle. Returns the index of the adjusted vocabulary.
absl::StatusOr<VocabIndex> BuildVocabIndex(Vocab* vocab);

}  // namespace baton::engine

#endif  // BATON_ENGINE_VOCAB_INDEX_H_
