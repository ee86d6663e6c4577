#include "engine/tokenizer_special.h"

namespace baton::engine {

std::vector<TextFragment> PartitionSpecialTokens(std::string_view text, const Vocab& vocab,
                                                 const VocabIndex& index, bool parse_special) {
  std::vector<TextFragment> fragments;
  if (text.empty()) return fragments;
  fragments.push_back({kNoToken, text});
  std::vector<TextFragment> next;
  for (TokenId id : index.special_tokens) {
    if (!parse_special && (index.attrs[id] & (kTokenAttrControl | kTokenAttrUnknown))) continue;
    const std::string_view special = vocab.tokens[id];  // never empty (ValidateVocab)
    next.clear();
    bool found = false;
    for (const TextFragment& fragment : fragments) {
      if (fragment.token != kNoToken) {
        next.push_back(fragment);
        continue;
      }
      std::string_view rest = fragment.text;
      for (size_t pos = rest.find(special); pos != std::string_view::npos;
           pos = rest.find(special)) {
        found = true;
        if (pos > 0) next.push_back({kNoToken, rest.substr(0, pos)});
        next.push_back({id, {}});
        rest.remove_prefix(pos + special.size());
      }
      if (!rest.empty()) next.push_back({kNoToken, rest});
    }
    if (found) fragments.swap(next);
  }
  return fragments;
}

}  // namespace baton::engine
