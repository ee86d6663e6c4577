// IncrementalDetokenizer (declared in tokenizer.h).
#include "engine/tokenizer.h"
#include "engine/unicode.h"

namespace baton::engine {

std::string IncrementalDetokenizer::Add(TokenId id) {
  std::string piece = tokenizer_.TokenToPiece(id, render_special_);
  const Vocab& vocab = tokenizer_.vocab();
  const bool leading_bos = !started_ && id == vocab.bos_id && vocab.bos_id != kNoToken;
  started_ = true;
  if (first_ && !leading_bos) {
    first_ = false;
    if (vocab.add_space_prefix && !piece.empty() && piece[0] == ' ') piece.erase(0, 1);
  }
  pending_ += piece;

  std::string out;
  size_t i = 0;
  while (i < pending_.size()) {
    size_t length = 0;
    const unicode::Utf8Scan scan = unicode::ScanUtf8(std::string_view(pending_).substr(i), &length);
    if (scan == unicode::Utf8Scan::kIncomplete) break;  // hold back until more bytes arrive
    if (scan == unicode::Utf8Scan::kValid) {
      out.append(pending_, i, length);
    } else {
      unicode::AppendUtf8(unicode::kReplacementChar, &out);
    }
    i += length;
  }
  pending_.erase(0, i);
  return out;
}

std::string IncrementalDetokenizer::Flush() {
  std::string out = unicode::SanitizeUtf8(pending_);
  pending_.clear();
  return out;
}

}  // namespace baton::engine
