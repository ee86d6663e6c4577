#include "engine/tokenizer_spm.h"

#include <cmath>
#include <limits>
#include <optional>
#include <string>

#include "absl/strings/str_format.h"
#include "engine/symbol_merge.h"
#include "engine/unicode.h"

namespace baton::engine {

SpmEncoder::SpmEncoder(const Vocab& vocab, const VocabIndex* index) : index_(index) {
  scores_.assign(vocab.size(), 0.0f);
  for (size_t i = 0; i < vocab.scores.size() && i < scores_.size(); ++i) {
    scores_[i] =
        std::isnan(vocab.scores[i]) ? -std::numeric_limits<float>::infinity() : vocab.scores[i];
  }
  for (int b = 0; b < 256; ++b) {
    TokenId id = kNoToken;
    if (auto it = index_->text_to_id.find(absl::StrFormat("<0x%02X>", b));
        it != index_->text_to_id.end()) {
      id = it->second;
    } else if (auto it2 = index_->text_to_id.find(std::string(1, static_cast<char>(b)));
               it2 != index_->text_to_id.end()) {
      id = it2->second;
    } else {
      id = vocab.unk_id;
    }
    byte_tokens_[b] = id;
  }
}

void SpmEncoder::Encode(std::string_view text, std::vector<TokenId>* out) const {
  const auto& text_to_id = index_->text_to_id;
  // Adjacent symbols are contiguous in `text`: their concatenation is a view too.
  const std::vector<std::string_view> pieces =
      MergeSymbols(text, [&](std::string_view left, std::string_view right) {
        auto it = text_to_id.find(std::string_view(left.data(), left.size() + right.size()));
        if (it == text_to_id.end()) return std::optional<double>();
        return std::optional<double>(-double{scores_[it->second]});  // highest score first
      });
  for (const std::string_view piece : pieces) {
    if (auto it = text_to_id.find(piece); it != text_to_id.end()) {
      out->push_back(it->second);
      continue;
    }
    // Merged symbols are always tokens: only single characters get here.
    for (char c : piece) {
      const TokenId id = byte_tokens_[static_cast<uint8_t>(c)];
      if (id != kNoToken) out->push_back(id);
    }
  }
}

}  // namespace baton::engine
