#include "kvtransfer/push_cursor.h"

#include <utility>
#include <vector>

#include "gtest/gtest.h"

namespace baton::kvtransfer {
namespace {

KvPushSpec Spec(int32_t n_layer, int32_t n_blocks, int32_t chunk_blocks) {
  return {.reservation_id = "r", .model_fingerprint = "m", .n_layer = n_layer, .kv_dim = 4,
          .block_size = 8, .n_tokens = n_blocks * 8 - 3, .chunk_blocks = chunk_blocks};
}

// Walks a cursor one block at a time and records the (layer, block) order.
std::vector<std::pair<int32_t, int32_t>> Walk(const KvPushSpec& spec) {
  std::vector<std::pair<int32_t, int32_t>> order;
  PushCursor cursor(spec);
  while (!cursor.done()) {
    order.emplace_back(cursor.layer(), cursor.block());
    cursor.Advance(1);
  }
  return order;
}

TEST(PushCursorTest, OneRangeIsLayerMajor) {
  const std::vector<std::pair<int32_t, int32_t>> expected = {{0, 0}, {0, 1}, {0, 2},
                                                             {1, 0}, {1, 1}, {1, 2}};
  EXPECT_EQ(Walk(Spec(2, 3, 0)), expected);
  EXPECT_EQ(Walk(Spec(2, 3, 3)), expected);
  EXPECT_EQ(Walk(Spec(2, 3, 7)), expected);  // a range larger than the prompt is one range
}

TEST(PushCursorTest, RangesGoOneAfterTheOtherWithTheShortOneLast) {
  const std::vector<std::pair<int32_t, int32_t>> expected = {
      {0, 0}, {0, 1}, {1, 0}, {1, 1}, {0, 2}, {0, 3}, {1, 2}, {1, 3}, {0, 4}, {1, 4}};
  EXPECT_EQ(Walk(Spec(2, 5, 2)), expected);
}

TEST(PushCursorTest, BlocksTheReceiverHoldsAreSkippedAndRangesKeepTheirPlaces) {
  KvPushSpec spec = Spec(2, 5, 2);
  spec.first_block = 1;  // ranges [0,2) [2,4) [4,5); the first clipped to [1,2)
  const std::vector<std::pair<int32_t, int32_t>> expected = {
      {0, 1}, {1, 1}, {0, 2}, {0, 3}, {1, 2}, {1, 3}, {0, 4}, {1, 4}};
  EXPECT_EQ(Walk(spec), expected);
  spec.first_block = 2;  // on a range boundary: whole ranges from there
  EXPECT_EQ(Walk(spec).front(), std::make_pair(0, 2));
  EXPECT_EQ(Walk(spec).size(), 6u);
  spec.chunk_blocks = 0;  // one range, clipped
  spec.first_block = 3;
  const std::vector<std::pair<int32_t, int32_t>> one_range = {{0, 3}, {0, 4}, {1, 3}, {1, 4}};
  EXPECT_EQ(Walk(spec), one_range);
  EXPECT_EQ(spec.total_bytes(), 2 * spec.layer_block_bytes() * 2);

  PushCursor cursor(Spec(2, 5, 2));
  KvPushSpec skipping = Spec(2, 5, 2);
  skipping.first_block = 3;
  PushCursor skipped(skipping);
  EXPECT_EQ(skipped.range_begin(), 3);
  EXPECT_EQ(skipped.range_end(), 4);
  EXPECT_FALSE(skipped.InOneRange(0, 2, 1));  // held by the receiver: not part of the push
  EXPECT_TRUE(skipped.InOneRange(0, 3, 1));
  uint8_t byte = 0;
  EXPECT_TRUE(skipped.CheckSendLayer(0, {&byte}).ok());
  EXPECT_EQ(skipped.CheckSendLayer(0, {&byte, &byte}).code(), absl::StatusCode::kInvalidArgument);
}

TEST(PushCursorTest, AWindowedLayerSendsOnlyTheBlocksItsWindowStillSees) {
  KvPushSpec spec = Spec(3, 5, 2);  // 37 tokens; ranges [0,2) [2,4) [4,5)
  spec.layer_windows = {0, 16, 0};
  // The query at position 37 sees tokens 22..37: layer 1 sends blocks 2, 3, 4.
  EXPECT_EQ(spec.LayerFirstBlock(0), 0);
  EXPECT_EQ(spec.LayerFirstBlock(1), 2);
  const std::vector<std::pair<int32_t, int32_t>> expected = {
      {0, 0}, {0, 1}, {2, 0}, {2, 1},                   // layer 1 has none of [0, 2)
      {0, 2}, {0, 3}, {1, 2}, {1, 3}, {2, 2}, {2, 3},   //
      {0, 4}, {1, 4}, {2, 4}};
  EXPECT_EQ(Walk(spec), expected);
  EXPECT_EQ(spec.total_bytes(), 13 * spec.layer_block_bytes());

  PushCursor cursor(spec);
  EXPECT_FALSE(cursor.InOneRange(1, 1, 1));  // before layer 1's window
  EXPECT_TRUE(cursor.InOneRange(1, 2, 2));
  uint8_t byte = 0;
  cursor.Advance(2);  // layer 1's empty span is passed over
  EXPECT_EQ(cursor.layer(), 2);
  EXPECT_EQ(cursor.CheckSendLayer(1, {&byte, &byte}).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(cursor.CheckSendLayer(2, {&byte, &byte}).ok());
  // What is still to come, by layer (a stream's share).
  EXPECT_TRUE(cursor.AnyAhead([](int32_t layer) { return layer == 1; }));
  cursor.Advance(2);
  cursor.Advance(2);
  cursor.Advance(2);  // range [2,4), layer 2
  EXPECT_TRUE(cursor.AnyAhead([](int32_t layer) { return layer == 0; }));
  cursor.Advance(2);
  cursor.Advance(1);
  cursor.Advance(1);  // layer 2 of the last range
  EXPECT_FALSE(cursor.AnyAhead([](int32_t layer) { return layer != 2; }));
  EXPECT_TRUE(cursor.AnyAhead([](int32_t layer) { return layer == 2; }));
  cursor.Advance(1);
  EXPECT_TRUE(cursor.done());
  EXPECT_FALSE(cursor.AnyAhead([](int32_t) { return true; }));
}

TEST(PushCursorTest, RangesNoLayerSendsArePassedOver) {
  KvPushSpec spec = Spec(2, 5, 2);
  spec.layer_windows = {16, 16};
  const std::vector<std::pair<int32_t, int32_t>> expected = {{0, 2}, {0, 3}, {1, 2},
                                                             {1, 3}, {0, 4}, {1, 4}};
  EXPECT_EQ(Walk(spec), expected);
  PushCursor cursor(spec);
  EXPECT_EQ(cursor.range_begin(), 2);
  // A window longer than the prompt: every block.
  spec.layer_windows = {64, 0};
  EXPECT_EQ(Walk(spec).size(), 10u);
}

TEST(PushCursorTest, AdvancingAWholeLayerOfARange) {
  PushCursor cursor(Spec(2, 5, 2));
  EXPECT_EQ(cursor.range_end(), 2);
  cursor.Advance(2);
  EXPECT_EQ(cursor.layer(), 1);
  EXPECT_EQ(cursor.block(), 0);
  cursor.Advance(2);
  EXPECT_EQ(cursor.layer(), 0);
  EXPECT_EQ(cursor.range_begin(), 2);
  EXPECT_EQ(cursor.range_end(), 4);
  cursor.Advance(2);
  cursor.Advance(2);
  EXPECT_EQ(cursor.range_begin(), 4);
  EXPECT_EQ(cursor.range_end(), 5);
  cursor.Advance(1);
  cursor.Advance(1);
  EXPECT_TRUE(cursor.done());
  EXPECT_EQ(cursor.Describe(), "the end of the push");
}

TEST(PushCursorTest, AheadAndRangeChecks) {
  PushCursor cursor(Spec(3, 5, 2));
  cursor.Advance(2);  // layer 1, block 0
  EXPECT_FALSE(cursor.IsAhead(1, 0));  // at the cursor
  EXPECT_FALSE(cursor.IsAhead(0, 0));  // behind
  EXPECT_TRUE(cursor.IsAhead(2, 0));
  EXPECT_TRUE(cursor.IsAhead(1, 1));
  EXPECT_TRUE(cursor.IsAhead(0, 2));  // a later range, even at a lower layer
  EXPECT_TRUE(cursor.InOneRange(0, 0, 2));
  EXPECT_FALSE(cursor.InOneRange(0, 1, 2));  // spans [0,2) and [2,4)
  EXPECT_TRUE(cursor.InOneRange(0, 4, 1));
  EXPECT_FALSE(cursor.InOneRange(0, 4, 2));  // past the last block
  EXPECT_FALSE(cursor.InOneRange(0, 5, 1));
  EXPECT_FALSE(cursor.InOneRange(0, -1, 1));
  EXPECT_FALSE(cursor.InOneRange(0, 0, 0));
}

TEST(PushCursorTest, CheckSendLayerWantsTheCurrentRangesPointers) {
  PushCursor cursor(Spec(2, 3, 2));
  uint8_t byte = 0;
  const std::vector<const uint8_t*> two = {&byte, &byte};
  const std::vector<const uint8_t*> one = {&byte};
  EXPECT_TRUE(cursor.CheckSendLayer(0, two).ok());
  EXPECT_EQ(cursor.CheckSendLayer(1, two).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(cursor.CheckSendLayer(0, one).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(cursor.CheckSendLayer(0, {&byte, nullptr}).code(),
            absl::StatusCode::kInvalidArgument);
  cursor.Advance(2);
  cursor.Advance(2);  // the last range holds one block
  EXPECT_TRUE(cursor.CheckSendLayer(0, one).ok());
  EXPECT_EQ(cursor.CheckSendLayer(0, two).code(), absl::StatusCode::kInvalidArgument);
  cursor.Advance(1);
  cursor.Advance(1);
  EXPECT_EQ(cursor.CheckSendLayer(0, one).code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace baton::kvtransfer
