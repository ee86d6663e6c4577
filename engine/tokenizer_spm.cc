#include "engine/tokenizer_spm.h"

#include <cmath>
#include <limits>
#include <queue>
#include <string>

#include "absl/strings/str_format.h"
#include "engine/unicode.h"

namespace baton::engine {
namespace {

struct Symbol {
  int32_t prev;
  int32_t next;
  uint32_t start;
  uint32_t size;  // 0 once merged into the symbol on its left
};

struct Bigram {
  int32_t left;
  int32_t right;
  float score;
  uint32_t size;
};

// top() is the highest score, then the leftmost pair.
struct BigramAfter {
  bool operator()(const Bigram& a, const Bigram& b) const {
    return a.score < b.score || (a.score == b.score && a.left > b.left);
  }
};

}  // namespace

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
  std::vector<Symbol> symbols;
  symbols.reserve(text.size());
  for (size_t offset = 0; offset < text.size();) {
    const size_t size = std::min(
        text.size() - offset, unicode::Utf8LengthFromLeadByte(static_cast<uint8_t>(text[offset])));
    const int32_t i = static_cast<int32_t>(symbols.size());
    symbols.push_back({i - 1, offset + size == text.size() ? -1 : i + 1,
                       static_cast<uint32_t>(offset), static_cast<uint32_t>(size)});
    offset += size;
  }

  std::priority_queue<Bigram, std::vector<Bigram>, BigramAfter> queue;
  auto add_bigram = [&](int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    const uint32_t size = symbols[left].size + symbols[right].size;
    auto it = text_to_id.find(text.substr(symbols[left].start, size));
    if (it == text_to_id.end()) return;
    queue.push({left, right, scores_[it->second], size});
  };
  for (int32_t i = 1; i < static_cast<int32_t>(symbols.size()); ++i) add_bigram(i - 1, i);

  while (!queue.empty()) {
    const Bigram bigram = queue.top();
    queue.pop();
    Symbol& left = symbols[bigram.left];
    Symbol& right = symbols[bigram.right];
    if (left.size == 0 || right.size == 0 || left.size + right.size != bigram.size) continue;
    left.size += right.size;
    right.size = 0;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = bigram.left;
    add_bigram(left.prev, bigram.left);
    add_bigram(bigram.left, left.next);
  }

  for (int32_t i = symbols.empty() ? -1 : 0; i != -1; i = symbols[i].next) {
    const std::string_view piece = text.substr(symbols[i].start, symbols[i].size);
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
