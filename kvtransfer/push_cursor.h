// A position in a push's canonical order (kv_push_spec.h): the next (block range, layer, block)
// to send or to write. Senders move it a layer of a range at a time, the receiving assembler a
// chunk at a time; both use it to check that data comes in order. A layer's span of a range is
// the range's blocks from the layer's first block sent (KvPushSpec::LayerFirstBlock); the cursor
// passes over empty spans, so it always stands in one that has blocks, or at the end.
//
// Thread-safety: plain value type.
#ifndef BATON_KVTRANSFER_PUSH_CURSOR_H_
#define BATON_KVTRANSFER_PUSH_CURSOR_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "kvtransfer/kv_push_spec.h"

namespace baton::kvtransfer {

class PushCursor {
 public:
  // `spec` must pass ValidateSpec (kv_wire.h).
  explicit PushCursor(const KvPushSpec& spec);

  int32_t layer() const { return layer_; }
  int32_t block() const { return block_; }
  // The current range: blocks [range_begin, range_end).
  int32_t range_begin() const { return range_begin_; }
  int32_t range_end() const;
  // Every block of every layer has been passed.
  bool done() const { return range_begin_ >= n_blocks_; }

  // Moves past `n_blocks` blocks of the current layer; 0 < n_blocks <= range_end() - block().
  void Advance(int32_t n_blocks);

  // Whether `first_block` is among `layer`'s blocks sent and [first_block, first_block +
  // n_blocks) stays inside one range.
  bool InOneRange(int32_t layer, int32_t first_block, int32_t n_blocks) const;
  // Whether data for (layer, first_block) comes after the cursor in the canonical order.
  bool IsAhead(int32_t layer, int32_t first_block) const;
  // Whether a span with blocks of a layer for which `of_layer` holds lies at or after the
  // cursor: data still to come.
  bool AnyAhead(const std::function<bool(int32_t layer)>& of_layer) const;

  // A sender's check of KvPush::SendLayer(layer, blocks): the cursor must be at the start of
  // `layer`'s span of the current range, and `blocks` must hold that span's block pointers, none
  // null. INVALID_ARGUMENT saying which is wrong otherwise.
  absl::Status CheckSendLayer(int32_t layer, const std::vector<const uint8_t*>& blocks) const;

  // Where the cursor stands ("layer L from block b (range [a, c))"), for messages.
  std::string Describe() const;

 private:
  int32_t RangeOf(int32_t block) const { return block / range_blocks_; }
  // The first block of `layer`'s span of the range that begins at range_begin.
  int32_t SpanBegin(int32_t range_begin, int32_t layer) const;
  // From (range_begin_, layer_) on, the first span with blocks; block_ at its start.
  void SkipEmptySpans();

  KvPushSpec spec_;
  int32_t n_layer_;
  int32_t n_blocks_;
  int32_t first_block_;  // the first block any layer sends
  int32_t range_blocks_;
  int32_t range_begin_;  // the current range, clipped to the blocks sent
  int32_t layer_ = 0;
  int32_t block_;
};

}  // namespace baton::kvtransfer

#endif  // BATON_KVTRANSFER_PUSH_CURSOR_H_
