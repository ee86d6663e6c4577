// Splits text around the special tokens it contains, as llama.cpp's tokenizer_st_partition does,
// before the model's own tokenization runs on the pieces of plain text.
//
// Special tokens are tried longest first; each one splits every remaining piece of text at all
// its (non-overlapping, leftmost-first) occurrences. Control and unknown tokens are looked for only
// when `parse_special`; user-defined tokens always are (as in llama.cpp and Hugging Face).
//
// Thread-safety: a pure function.
#ifndef BATON_ENGINE_TOKENIZER_SPECIAL_H_
#define BATON_ENGINE_TOKENIZER_SPECIAL_H_

#include <string_view>
#include <vector>

#include "engine/vocab.h"
#include "engine/vocab_index.h"

namespace baton::engine {

// Either a special token (token != kNoToken) or a non-empty piece of plain text.
struct TextFragment {
  TokenId token = kNoToken;
  std::string_view text;  // views into the text given to PartitionSpecialTokens
};

std::vector<TextFragment> PartitionSpecialTokens(std::string_view text, const Vocab& vocab,
                                                 const VocabIndex& index, bool parse_special);

}  // namespace baton::engine

#endif  // BATON_ENGINE_TOKENIZER_SPECIAL_H_
