#include "engine/tokenizer.h"

#include <algorithm>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "engine/gguf_file.h"
#include "engine/tokenizer_bpe.h"
#include "engine/tokenizer_json.h"
#include "engine/tokenizer_special.h"
#include "engine/tokenizer_spm.h"
#include "engine/unicode.h"
#include "engine/vocab_index.h"

namespace baton::engine {
namespace {

constexpr std::string_view kSpmSpace = "\xE2\x96\x81";  // U+2581, SentencePiece's space

// `text` with every occurrence of `from` replaced by `to`, appended to `out`.
void AppendReplacing(std::string_view text, std::string_view from, std::string_view to,
                     std::string* out) {
  for (size_t pos = text.find(from); pos != std::string_view::npos; pos = text.find(from)) {
    out->append(text.substr(0, pos));
    out->append(to);
    text.remove_prefix(pos + from.size());
  }
  out->append(text);
}

// llama.cpp's token_to_byte: the hex digits of "<0xXX>".
char ByteOfByteToken(std::string_view text) {
  std::string digits(text.size() > 3 ? text.substr(3, 2) : std::string_view());
  return static_cast<char>(std::strtol(digits.c_str(), nullptr, 16));
}

// llama.cpp's llama_decode_text: byte-level alphabet back to bytes.
std::string DecodeByteLevel(std::string_view text) {
  std::vector<uint32_t> cpts;
  unicode::DecodeUtf8Lenient(text, &cpts);
  std::string out;
  out.reserve(cpts.size());
  for (uint32_t cpt : cpts) {
    const int byte = unicode::UnicodeToByte(cpt);
    if (byte >= 0) {
      out.push_back(static_cast<char>(byte));
      continue;
    }
    std::string utf8;
    unicode::AppendUtf8(cpt, &utf8);
    absl::StrAppend(&out, "[UNK_BYTE_0x");
    for (char c : utf8) absl::StrAppendFormat(&out, "%02x", static_cast<uint8_t>(c));
    out.append(text);
    out.append("]");
  }
  return out;
}

class TokenizerImpl final : public Tokenizer {
 public:
  TokenizerImpl(Vocab vocab, VocabIndex index)
      : Tokenizer(std::move(vocab), index.eog_ids), index_(std::move(index)) {
    pieces_.reserve(vocab_.tokens.size());
    for (TokenId id = 0; id < vocab_.size(); ++id) pieces_.push_back(MakePiece(id));
  }

  absl::Status Init() {
    if (vocab_.model != TokenizerModel::kSentencePiece) {
      absl::StatusOr<std::unique_ptr<BpeEncoder>> bpe = BpeEncoder::Create(vocab_, &index_);
      if (!bpe.ok()) return bpe.status();
      bpe_ = std::move(*bpe);
    } else {
      spm_ = std::make_unique<SpmEncoder>(vocab_, &index_);
    }
    return absl::OkStatus();
  }

  std::vector<TokenId> Encode(std::string_view text, const EncodeOptions& options) const override {
    std::vector<TokenId> out;
    out.reserve(text.size() / 3 + 2);
    if (options.add_bos && vocab_.bos_id != kNoToken) out.push_back(vocab_.bos_id);
    const std::vector<TextFragment> fragments =
        PartitionSpecialTokens(text, vocab_, index_, options.parse_special);
    if (bpe_ != nullptr) {
      for (const TextFragment& fragment : fragments) {
        if (fragment.token != kNoToken) {
          out.push_back(fragment.token);
        } else if (vocab_.preparation.has_value()) {
          bpe_->Encode(NormalizeText(*vocab_.preparation, fragment.text), &out);
        } else {
          bpe_->Encode(fragment.text, &out);
        }
      }
    } else {
      // The space prefix goes before the first piece of text and after every special token.
      bool after_special = true;
      std::string escaped;
      for (const TextFragment& fragment : fragments) {
        if (fragment.token != kNoToken) {
          out.push_back(fragment.token);
          after_special = true;
          continue;
        }
        escaped.clear();
        if (vocab_.add_space_prefix && after_special) escaped = kSpmSpace;
        AppendReplacing(fragment.text, " ", kSpmSpace, &escaped);
        spm_->Encode(escaped, &out);
        after_special = false;
      }
    }
    if (options.add_eos && vocab_.eos_id != kNoToken) out.push_back(vocab_.eos_id);
    return out;
  }

  std::string TokenToPiece(TokenId id, bool render_special) const override {
    if (id < 0 || id >= vocab_.size()) return "";
    if (!render_special && (index_.attrs[id] & (kTokenAttrUnknown | kTokenAttrControl))) return "";
    return pieces_[id];
  }

 private:
  // The piece with render_special, as llama.cpp's token_to_piece.
  std::string MakePiece(TokenId id) const {
    const uint32_t attr = index_.attrs[id];
    const std::string& text = vocab_.tokens[id];
    if (attr & (kTokenAttrUnknown | kTokenAttrControl | kTokenAttrUserDefined)) return text;
    if (attr & kTokenAttrNormal) {
      if (vocab_.model == TokenizerModel::kBytePairGpt2) return DecodeByteLevel(text);
      std::string piece;
      AppendReplacing(text, kSpmSpace, " ", &piece);
      return piece;
    }
    if (attr & kTokenAttrByte) return std::string(1, ByteOfByteToken(text));
    return "";  // unused and undefined tokens
  }

  VocabIndex index_;
  std::vector<std::string> pieces_;  // [n_vocab]
  std::unique_ptr<BpeEncoder> bpe_;  // gpt2, chars
  std::unique_ptr<SpmEncoder> spm_;  // llama
};

}  // namespace

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::Load(const std::string& path) {
  if (IsTokenizerJsonPath(path)) {
    absl::StatusOr<Vocab> vocab = LoadTokenizerJson(path);
    if (!vocab.ok()) return vocab.status();
    return Create(std::move(*vocab));
  }
  absl::StatusOr<std::unique_ptr<GgufFile>> file = GgufFile::Open(path);
  if (!file.ok()) return file.status();
  absl::StatusOr<Vocab> vocab = LoadVocab(**file);
  if (!vocab.ok()) return vocab.status();
  return Create(std::move(*vocab));
}

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::Create(Vocab vocab) {
  absl::StatusOr<VocabIndex> index = BuildVocabIndex(&vocab);
  if (!index.ok()) return index.status();
  auto tokenizer = std::make_unique<TokenizerImpl>(std::move(vocab), std::move(*index));
  if (absl::Status s = tokenizer->Init(); !s.ok()) return s;
  return tokenizer;
}

std::string Tokenizer::Decode(const std::vector<TokenId>& ids, bool render_special) const {
  std::string out;
  size_t i = 0;
  if (!ids.empty() && ids[0] == vocab_.bos_id && vocab_.bos_id != kNoToken) {
    out += TokenToPiece(ids[0], render_special);
    i = 1;
  }
  for (bool first = true; i < ids.size(); ++i, first = false) {
    std::string piece = TokenToPiece(ids[i], render_special);
    if (first && vocab_.add_space_prefix && !piece.empty() && piece[0] == ' ') piece.erase(0, 1);
    out += piece;
  }
  return out;
}

bool Tokenizer::IsEndOfGeneration(TokenId id) const {
  return id != kNoToken && std::binary_search(eog_ids_.begin(), eog_ids_.end(), id);
}

}  // namespace baton::engine
