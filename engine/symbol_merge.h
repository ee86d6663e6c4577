// The merge loop that both BPE tokenizers share (byte-level BPE, tokenizer_bpe.h, and
// SentencePiece BPE, tokenizer_spm.h), as llama.cpp runs it: `text` is cut into UTF-8 characters
// by their lead bytes (no validation; a truncated last character keeps the bytes there are), then
// adjacent symbols are merged pair by pair, always the pair with the lowest priority value first
// (the leftmost on ties), until no adjacent pair may merge.
//
// Thread-safety: a pure function.
#ifndef BATON_ENGINE_SYMBOL_MERGE_H_
#define BATON_ENGINE_SYMBOL_MERGE_H_

#include <algorithm>
#include <cstdint>
#include <optional>
#include <queue>
#include <string_view>
#include <vector>

#include "engine/unicode.h"

namespace baton::engine {

// `pair_priority(left, right)` returns the priority of merging the adjacent pieces `left` and
// `right` (views into `text`; left ends where right starts), or nullopt when they may not merge.
// Returns the final symbols, left to right, as views into `text`.
template <typename PairPriority>
std::vector<std::string_view> MergeSymbols(std::string_view text, PairPriority pair_priority) {
  struct Symbol {
    int32_t prev;
    int32_t next;
    uint32_t start;  // byte offset in text
    uint32_t size;   // bytes; 0 once merged into the symbol on its left
  };
  struct Pair {
    int32_t left;
    int32_t right;
    double priority;
    uint32_t size;  // left.size + right.size when queued: a stale entry no longer matches
  };
  // top() is the lowest priority value, then the leftmost pair.
  struct PairAfter {
    bool operator()(const Pair& a, const Pair& b) const {
      return a.priority > b.priority || (a.priority == b.priority && a.left > b.left);
    }
  };

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
  auto view = [&](int32_t i) { return text.substr(symbols[i].start, symbols[i].size); };

  std::priority_queue<Pair, std::vector<Pair>, PairAfter> queue;
  auto add_pair = [&](int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    const std::optional<double> priority = pair_priority(view(left), view(right));
    if (!priority.has_value()) return;
    queue.push({left, right, *priority, symbols[left].size + symbols[right].size});
  };
  for (int32_t i = 1; i < static_cast<int32_t>(symbols.size()); ++i) add_pair(i - 1, i);

  while (!queue.empty()) {
    const Pair pair = queue.top();
    queue.pop();
    Symbol& left = symbols[pair.left];
    Symbol& right = symbols[pair.right];
    if (left.size == 0 || right.size == 0 || left.size + right.size != pair.size) continue;
    left.size += right.size;
    right.size = 0;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = pair.left;
    add_pair(left.prev, pair.left);
    add_pair(pair.left, left.next);
  }

  std::vector<std::string_view> pieces;
  for (int32_t i = symbols.empty() ? -1 : 0; i != -1; i = symbols[i].next) pieces.push_back(view(i));
  return pieces;
}

}  // namespace baton::engine

#endif  // BATON_ENGINE_SYMBOL_MERGE_H_
