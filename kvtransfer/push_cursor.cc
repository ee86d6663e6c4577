#include "kvtransfer/push_cursor.h"

#include <algorithm>
#include <tuple>

#include "absl/strings/str_cat.h"

namespace baton::kvtransfer {

namespace {

// The first block any layer of `spec` sends.
int32_t FirstBlockSent(const KvPushSpec& spec) {
  int32_t first = spec.n_blocks();
  for (int32_t layer = 0; layer < spec.n_layer; ++layer) {
    first = std::min(first, spec.LayerFirstBlock(layer));
  }
  return first;
}

}  // namespace

PushCursor::PushCursor(const KvPushSpec& spec)
    : spec_(spec),
      n_layer_(spec.n_layer),
      n_blocks_(spec.n_blocks()),
      first_block_(FirstBlockSent(spec)),
      range_blocks_(std::max(1, spec.range_blocks())),
      range_begin_(first_block_),
      block_(first_block_) {
  SkipEmptySpans();
}

int32_t PushCursor::range_end() const { return spec_.RangeEnd(range_begin_); }

int32_t PushCursor::SpanBegin(int32_t range_begin, int32_t layer) const {
  return std::max(range_begin, spec_.LayerFirstBlock(layer));
}

void PushCursor::SkipEmptySpans() {
  while (!done()) {
    if (layer_ == n_layer_) {
      range_begin_ = range_end();
      layer_ = 0;
      continue;
    }
    block_ = SpanBegin(range_begin_, layer_);
    if (block_ < range_end()) return;
    ++layer_;
  }
  layer_ = 0;
  block_ = range_begin_;
}

void PushCursor::Advance(int32_t n_blocks) {
  block_ += n_blocks;
  if (block_ < range_end()) return;
  ++layer_;
  SkipEmptySpans();
}

bool PushCursor::InOneRange(int32_t layer, int32_t first_block, int32_t n_blocks) const {
  if (layer < 0 || layer >= n_layer_ || first_block < spec_.LayerFirstBlock(layer) ||
      first_block >= n_blocks_ || n_blocks <= 0) {
    return false;
  }
  return int64_t{first_block} + n_blocks <= spec_.RangeEnd(first_block);
}

bool PushCursor::IsAhead(int32_t layer, int32_t first_block) const {
  return std::make_tuple(RangeOf(first_block), layer, first_block) >
         std::make_tuple(RangeOf(block_), layer_, block_);
}

bool PushCursor::AnyAhead(const std::function<bool(int32_t layer)>& of_layer) const {
  if (done()) return false;
  if (of_layer(layer_)) return true;  // the cursor stands in a span with blocks still to come
  int32_t layer = layer_ + 1;
  for (int32_t begin = range_begin_; begin < n_blocks_; begin = spec_.RangeEnd(begin), layer = 0) {
    for (; layer < n_layer_; ++layer) {
      if (SpanBegin(begin, layer) < spec_.RangeEnd(begin) && of_layer(layer)) return true;
    }
  }
  return false;
}

absl::Status PushCursor::CheckSendLayer(int32_t layer,
                                        const std::vector<const uint8_t*>& blocks) const {
  if (done()) {
    return absl::InvalidArgumentError(absl::StrCat("SendLayer(", layer, ") after the last layer"));
  }
  if (layer != layer_ || block_ != SpanBegin(range_begin_, layer_)) {
    return absl::InvalidArgumentError(
        absl::StrCat("SendLayer(", layer, "): expected layer ", layer_, " next"));
  }
  const int32_t expected = range_end() - block_;
  if (static_cast<int64_t>(blocks.size()) != expected) {
    return absl::InvalidArgumentError(absl::StrCat("SendLayer(", layer, "): expected ", expected,
                                                   " block pointers (blocks [", block_, ", ",
                                                   range_end(), ")), got ", blocks.size()));
  }
  for (size_t i = 0; i < blocks.size(); ++i) {
    if (blocks[i] == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("SendLayer(", layer, "): block ", i, " is null"));
    }
  }
  return absl::OkStatus();
}

std::string PushCursor::Describe() const {
  if (done()) return "the end of the push";
  return absl::StrCat("layer ", layer_, " from block ", block_, " (range [", range_begin_, ", ",
                      range_end(), "))");
}

}  // namespace baton::kvtransfer
