#include "kvtransfer/push_cursor.h"

#include <algorithm>
#include <tuple>

#include "absl/strings/str_cat.h"

namespace baton::kvtransfer {

PushCursor::PushCursor(const KvPushSpec& spec)
    : spec_(spec),
      n_layer_(spec.n_layer),
      n_blocks_(spec.n_blocks()),
      first_block_(spec.first_block),
      range_blocks_(std::max(1, spec.range_blocks())),
      range_begin_(spec.first_block),
      block_(spec.first_block) {}

int32_t PushCursor::range_end() const { return spec_.RangeEnd(range_begin_); }

void PushCursor::Advance(int32_t n_blocks) {
  block_ += n_blocks;
  if (block_ < range_end()) return;
  if (++layer_ < n_layer_) {
    block_ = range_begin_;
    return;
  }
  range_begin_ = range_end();
  layer_ = 0;
  block_ = range_begin_;
}

bool PushCursor::InOneRange(int32_t first_block, int32_t n_blocks) const {
  if (first_block < first_block_ || first_block >= n_blocks_ || n_blocks <= 0) return false;
  return int64_t{first_block} + n_blocks <= spec_.RangeEnd(first_block);
}

bool PushCursor::IsAhead(int32_t layer, int32_t first_block) const {
  return std::make_tuple(RangeOf(first_block), layer, first_block) >
         std::make_tuple(RangeOf(block_), layer_, block_);
}

absl::Status PushCursor::CheckSendLayer(int32_t layer,
                                        const std::vector<const uint8_t*>& blocks) const {
  if (done()) {
    return absl::InvalidArgumentError(absl::StrCat("SendLayer(", layer, ") after the last layer"));
  }
  if (layer != layer_ || block_ != range_begin_) {
    return absl::InvalidArgumentError(
        absl::StrCat("SendLayer(", layer, "): expected layer ", layer_, " next"));
  }
  const int32_t expected = range_end() - range_begin_;
  if (static_cast<int64_t>(blocks.size()) != expected) {
    return absl::InvalidArgumentError(absl::StrCat("SendLayer(", layer, "): expected ", expected,
                                                   " block pointers (blocks [", range_begin_, ", ",
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
