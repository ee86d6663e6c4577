#include "engine/tokenizer_bpe.h"

#include <optional>

#include "absl/hash/hash.h"
#include "absl/strings/str_format.h"
#include "engine/symbol_merge.h"
#include "engine/unicode.h"

namespace baton::engine {
namespace {

bool IsSurrogateLead(const std::string& s, size_t i) {
  return static_cast<uint8_t>(s[i]) == 0xED && i + 1 < s.size() &&
         static_cast<uint8_t>(s[i + 1]) >= 0xA0;
}

}  // namespace

size_t BpeEncoder::MergeHash::operator()(MergeKey key) const {
  return absl::HashOf(absl::string_view(key.first.data(), key.first.size()),
                      absl::string_view(key.second.data(), key.second.size()));
}

absl::StatusOr<std::unique_ptr<BpeEncoder>> BpeEncoder::Create(const Vocab& vocab,
                                                               const VocabIndex* index) {
  std::unique_ptr<BpeEncoder> encoder(new BpeEncoder());
  encoder->index_ = index;
  absl::StatusOr<std::unique_ptr<PreTokenizer>> pre;
  if (vocab.preparation.has_value()) {
    const TextPreparation& prep = *vocab.preparation;
    encoder->ignore_merges_ = prep.ignore_merges;
    encoder->byte_level_ = vocab.model == TokenizerModel::kBytePairGpt2;
    encoder->byte_fallback_ = prep.byte_fallback;
    encoder->fuse_unk_ = prep.fuse_unk;
    pre = PreTokenizer::Create(prep.splits);
  } else {
    absl::StatusOr<PreTokenizerKind> kind = PreTokenizerKindFromName(vocab.pre);
    if (!kind.ok()) return kind.status();
    encoder->ignore_merges_ = PreTokenizerIgnoresMerges(*kind);
    pre = PreTokenizer::Create(*kind);
  }
  if (!pre.ok()) return pre.status();
  encoder->pre_ = std::move(*pre);
  encoder->unk_id_ = vocab.unk_id;
  encoder->byte_tokens_.fill(kNoToken);
  if (encoder->byte_fallback_) {
    for (int byte = 0; byte < 256; ++byte) {
      auto it = index->text_to_id.find(absl::StrFormat("<0x%02X>", byte));
      if (it != index->text_to_id.end()) encoder->byte_tokens_[byte] = it->second;
    }
  }

  // As llama.cpp: split at the first space after the first byte; the first rank of a pair wins.
  encoder->ranks_.reserve(vocab.merges.size());
  for (size_t rank = 0; rank < vocab.merges.size(); ++rank) {
    const std::string_view merge = vocab.merges[rank];
    const size_t space = merge.find(' ', 1);
    if (space == std::string_view::npos) continue;
    encoder->ranks_.emplace(MergeKey(merge.substr(0, space), merge.substr(space + 1)),
                            static_cast<int32_t>(rank));
  }
  return encoder;
}

int32_t BpeEncoder::Rank(std::string_view left, std::string_view right) const {
  auto it = ranks_.find(MergeKey(left, right));
  return it == ranks_.end() ? -1 : it->second;
}

void BpeEncoder::Encode(std::string_view text, std::vector<TokenId>* out) const {
  if (!byte_level_) {
    std::vector<PreTokenizer::Range> words;
    pre_->Split(text, &words);
    for (const auto& [begin, end] : words) EncodeWord(text.substr(begin, end - begin), out);
    return;
  }
  std::vector<uint32_t> cpts;
  unicode::DecodeUtf8Lenient(text, &cpts);
  std::string clean;
  clean.reserve(text.size() + 16);
  bool has_surrogate = false;
  for (uint32_t cpt : cpts) {
    unicode::AppendUtf8(cpt, &clean);
    has_surrogate |= cpt >= 0xD800 && cpt <= 0xDFFF;
  }
  // PCRE2 needs well-formed UTF-8. llama.cpp keeps surrogates (decoded from ED A0..BF xx), whose
  // class is "other"; a private-use character of the same length and class stands in for them.
  std::string stand_in;
  std::string_view subject = clean;
  if (has_surrogate) {
    stand_in = clean;
    for (size_t i = 0; i < stand_in.size(); ++i) {
      if (IsSurrogateLead(stand_in, i)) stand_in.replace(i, 3, "\xEE\x80\x80");  // U+E000
    }
    subject = stand_in;
  }

  std::vector<PreTokenizer::Range> words;
  pre_->Split(subject, &words);
  std::string word;
  for (const auto& [begin, end] : words) {
    word.clear();
    for (size_t i = begin; i < end; ++i) {
      word += unicode::ByteToUnicode(static_cast<uint8_t>(clean[i]));
    }
    EncodeWord(word, out);
  }
}

void BpeEncoder::EncodeWord(std::string_view word, std::vector<TokenId>* out) const {
  const auto& text_to_id = index_->text_to_id;
  if (ignore_merges_) {
    if (auto it = text_to_id.find(word); it != text_to_id.end()) {
      out->push_back(it->second);
      return;
    }
  }

  const size_t word_start = out->size();
  const std::vector<std::string_view> pieces =
      MergeSymbols(word, [this](std::string_view left, std::string_view right) {
        const int32_t rank = Rank(left, right);
        return rank < 0 ? std::nullopt : std::optional<double>(rank);
      });
  for (const std::string_view piece : pieces) {
    if (auto it = text_to_id.find(piece); it != text_to_id.end()) {
      out->push_back(it->second);
      continue;
    }
    if (!byte_level_) {
      AppendUnknown(piece, word_start, out);
      continue;
    }
    for (size_t j = 0; j < piece.size(); ++j) {
      if (auto it = text_to_id.find(piece.substr(j, 1)); it != text_to_id.end()) {
        out->push_back(it->second);
      }
    }
  }
}

void BpeEncoder::AppendUnknown(std::string_view character, size_t word_start,
                               std::vector<TokenId>* out) const {
  if (byte_fallback_) {
    const size_t before = out->size();
    bool all_bytes = true;
    for (char c : character) {
      const TokenId id = byte_tokens_[static_cast<uint8_t>(c)];
      all_bytes &= id != kNoToken;
      out->push_back(id);
    }
    if (all_bytes) return;
    out->resize(before);
  }
  if (unk_id_ == kNoToken) return;  // as Hugging Face: dropped when there is no unknown token
  if (fuse_unk_ && out->size() > word_start && out->back() == unk_id_) return;
  out->push_back(unk_id_);
}

}  // namespace baton::engine
