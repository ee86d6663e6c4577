#include "kvtransfer/push_assembler.h"

#include "kvtransfer/kv_chunk_codec.h"

#include <memory>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kvtransfer/kv_wire.h"
#include "tests/kvtransfer/fake_receiver.h"
#include "tests/kvtransfer/kv_test_util.h"
#include "tests/support/status_matchers.h"

namespace baton::kvtransfer {
namespace {

using ::baton::kvtransfer::testing::FakeReceiver;
using ::baton::kvtransfer::testing::KvData;
using ::baton::kvtransfer::testing::MakeSpec;
using ::baton::test_support::IsOkAndHolds;

struct RecordingWaiter : KvStreamWaiter {
  void Wake(const absl::Status& status) override { wakes.push_back(status); }
  std::vector<absl::Status> wakes;
};

// The chunk as the service hands it over: encoded by the sender's codec, decoded by the
// receiver's.
ReceivedChunk Chunk(const KvData& data, const KvPushSpec& spec, int32_t layer, int32_t first,
                    int32_t count) {
  const std::vector<const uint8_t*> blocks = data.Range(layer, first, first + count);
  absl::StatusOr<ReceivedMessage> message = DecodePushMessage(EncodeChunkMessage(
      layer, first, blocks, static_cast<size_t>(spec.layer_block_bytes()), *BlockLoans::Create()));
  EXPECT_TRUE(message.ok() && message->chunk.has_value()) << message.status();
  return message.ok() && message->chunk.has_value() ? *message->chunk : ReceivedChunk();
}

PushHeaderInfo Info(const KvPushSpec& spec, int32_t stream_index, int32_t n_streams) {
  return {.spec = spec, .stream_index = stream_index, .n_streams = n_streams};
}

class PushAssemblerTest : public ::testing::Test {
 protected:
  PushAssemblerTest() : spec_(MakeSpec("r1", 4, 40)), data_(spec_, 7), registry_(&receiver_) {
    receiver_.Reserve(spec_, 3);
  }

  KvPushSpec spec_;
  KvData data_;
  FakeReceiver receiver_;
  PushRegistry registry_;
};

TEST_F(PushAssemblerTest, ReordersLayersArrivingOnTwoStreams) {
  auto s0 = registry_.Join(Info(spec_, 0, 2));
  auto s1 = registry_.Join(Info(spec_, 1, 2));
  ASSERT_TRUE(s0.ok() && s1.ok());
  ASSERT_EQ(s0->get(), s1->get());
  PushAssembler& push = **s0;
  EXPECT_EQ(receiver_.counts().begin, 1);
  RecordingWaiter w0, w1;
  KvStreamWakeups wakeups;

  // Stream 1's layer 1 comes first: parked until layer 0 is in.
  absl::StatusOr<bool> parked = push.Offer(1, &w1, Chunk(data_, spec_, 1, 0, 3), &wakeups);
  ASSERT_TRUE(parked.ok());
  EXPECT_TRUE(*parked);
  EXPECT_EQ(receiver_.counts().write, 0);
  // Layer 0 in two chunks; the second moves the cursor and writes the parked chunk.
  EXPECT_THAT(push.Offer(0, &w0, Chunk(data_, spec_, 0, 0, 2), &wakeups), IsOkAndHolds(false));
  EXPECT_TRUE(wakeups.empty());
  EXPECT_THAT(push.Offer(0, &w0, Chunk(data_, spec_, 0, 2, 1), &wakeups), IsOkAndHolds(false));
  ASSERT_EQ(wakeups.size(), 1u);
  EXPECT_EQ(wakeups[0].waiter, &w1);
  EXPECT_TRUE(wakeups[0].status.ok());
  RunWakeups(wakeups);
  EXPECT_EQ(w1.wakes.size(), 1u);

  // Stream 0 finishes its part (layer 2) before stream 1's layer 3: it waits for the outcome.
  EXPECT_THAT(push.Offer(0, &w0, Chunk(data_, spec_, 2, 0, 3), &wakeups), IsOkAndHolds(false));
  absl::StatusOr<bool> end0 = push.EndStream(0, &w0, &wakeups);
  ASSERT_TRUE(end0.ok()) << end0.status();
  EXPECT_TRUE(*end0);
  EXPECT_TRUE(wakeups.empty());
  EXPECT_EQ(receiver_.counts().end, 0);

  // The last layer completes the push and wakes stream 0 with OK.
  EXPECT_THAT(push.Offer(1, &w1, Chunk(data_, spec_, 3, 0, 3), &wakeups), IsOkAndHolds(false));
  EXPECT_EQ(receiver_.counts().end, 1);
  ASSERT_EQ(wakeups.size(), 1u);
  EXPECT_EQ(wakeups[0].waiter, &w0);
  EXPECT_TRUE(wakeups[0].status.ok());
  absl::StatusOr<bool> end1 = push.EndStream(1, &w1, &wakeups);
  ASSERT_TRUE(end1.ok()) << end1.status();
  EXPECT_FALSE(*end1);  // complete already: no waiting
  EXPECT_EQ(receiver_.reservation("r1").state, FakeReceiver::State::kReceived);
  EXPECT_EQ(receiver_.reservation("r1").bytes, data_.Expected(3));
  EXPECT_EQ(registry_.size(), 0u);
  EXPECT_EQ(receiver_.counts().abort, 0);
}

// A push in block ranges (chunked prefill): 4 layers, 3 blocks in ranges of 2, so the order is
// range [0,2) layers 0..3, then range [2,3) layers 0..3.
class PushAssemblerRangesTest : public ::testing::Test {
 protected:
  static KvPushSpec RangesSpec() {
    KvPushSpec spec = MakeSpec("r1", 4, 40);
    spec.chunk_blocks = 2;
    return spec;
  }
  PushAssemblerRangesTest() : spec(RangesSpec()), data(spec, 5), registry(&receiver) {
    receiver.Reserve(spec, 3);
  }

  KvPushSpec spec;
  KvData data;
  FakeReceiver receiver;
  PushRegistry registry;
};

TEST_F(PushAssemblerRangesTest, ReordersRangesArrivingOnTwoStreams) {
  auto s0 = registry.Join(Info(spec, 0, 2));
  ASSERT_TRUE(s0.ok() && registry.Join(Info(spec, 1, 2)).ok());
  PushAssembler& push = **s0;
  RecordingWaiter w0, w1;
  KvStreamWakeups wakeups;
  // Stream 0 races ahead: layer 0 of the first range is written, layer 2 parks.
  EXPECT_THAT(push.Offer(0, &w0, Chunk(data, spec, 0, 0, 2), &wakeups), IsOkAndHolds(false));
  EXPECT_THAT(push.Offer(0, &w0, Chunk(data, spec, 2, 0, 2), &wakeups), IsOkAndHolds(true));
  // Stream 1's layer 1 moves the cursor to the parked chunk, which is written.
  EXPECT_THAT(push.Offer(1, &w1, Chunk(data, spec, 1, 0, 2), &wakeups), IsOkAndHolds(false));
  ASSERT_EQ(wakeups.size(), 1u);
  EXPECT_EQ(wakeups[0].waiter, &w0);
  RunWakeups(wakeups);
  // Stream 0 is already on the second range while layer 3 of the first is missing: it parks.
  EXPECT_THAT(push.Offer(0, &w0, Chunk(data, spec, 0, 2, 1), &wakeups), IsOkAndHolds(true));
  EXPECT_THAT(push.Offer(1, &w1, Chunk(data, spec, 3, 0, 2), &wakeups), IsOkAndHolds(false));
  ASSERT_EQ(wakeups.size(), 1u);
  RunWakeups(wakeups);
  // The second range: stream 0 sends its layers 0 and 2 and ends; it waits for stream 1's.
  EXPECT_THAT(push.Offer(0, &w0, Chunk(data, spec, 2, 2, 1), &wakeups), IsOkAndHolds(true));
  EXPECT_THAT(push.Offer(1, &w1, Chunk(data, spec, 1, 2, 1), &wakeups), IsOkAndHolds(false));
  RunWakeups(wakeups);
  EXPECT_THAT(push.EndStream(0, &w0, &wakeups), IsOkAndHolds(true));
  EXPECT_THAT(push.Offer(1, &w1, Chunk(data, spec, 3, 2, 1), &wakeups), IsOkAndHolds(false));
  EXPECT_EQ(receiver.counts().end, 1);
  EXPECT_EQ(receiver.reservation("r1").bytes, data.Expected(3));
  EXPECT_EQ(receiver.counts().abort, 0);
}

// Layers 1 and 3 with a window of 8: the query at position 40 sees tokens 33.., so they send
// block 2 only, and stream 1 (layers 1 and 3) has nothing in the first range [0, 2).
class PushAssemblerWindowsTest : public ::testing::Test {
 protected:
  static KvPushSpec WindowsSpec() {
    KvPushSpec spec = MakeSpec("r1", 4, 40);
    spec.chunk_blocks = 2;
    spec.layer_windows = {0, 8, 0, 8};
    return spec;
  }
  PushAssemblerWindowsTest() : spec(WindowsSpec()), data(spec, 3), registry(&receiver) {
    receiver.Reserve(spec, 3);
  }
  // The push, joined by both streams; held as a stream holds it, past its conclusion.
  PushAssembler& Join() {
    auto s0 = registry.Join(Info(spec, 0, 2));
    auto s1 = registry.Join(Info(spec, 1, 2));
    EXPECT_TRUE(s0.ok() && s1.ok());
    joined = *s0;
    return *joined;
  }

  KvPushSpec spec;
  KvData data;
  FakeReceiver receiver;
  PushRegistry registry;
  std::shared_ptr<PushAssembler> joined;
  RecordingWaiter w0, w1;
  KvStreamWakeups wakeups;
};

TEST_F(PushAssemblerWindowsTest, ABlockBeforeALayersWindowFailsThePush) {
  PushAssembler& push = Join();
  EXPECT_THAT(push.Offer(1, &w1, Chunk(data, spec, 1, 2, 1), &wakeups), IsOkAndHolds(true));
  EXPECT_EQ(push.Offer(1, &w1, Chunk(data, spec, 3, 1, 1), &wakeups).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(receiver.counts().abort, 1);
  ASSERT_EQ(wakeups.size(), 1u);  // the parked stream hears of the failure
  EXPECT_FALSE(wakeups[0].status.ok());
}

TEST_F(PushAssemblerWindowsTest, AStreamOfWindowedLayersWaitsOutTheRangesItHasNothingIn) {
  PushAssembler& push = Join();
  EXPECT_THAT(push.Offer(1, &w1, Chunk(data, spec, 1, 2, 1), &wakeups), IsOkAndHolds(true));
  EXPECT_THAT(push.Offer(0, &w0, Chunk(data, spec, 0, 0, 2), &wakeups), IsOkAndHolds(false));
  EXPECT_THAT(push.Offer(0, &w0, Chunk(data, spec, 2, 0, 2), &wakeups), IsOkAndHolds(false));
  EXPECT_THAT(push.Offer(0, &w0, Chunk(data, spec, 0, 2, 1), &wakeups), IsOkAndHolds(false));
  ASSERT_EQ(wakeups.size(), 1u);  // layer 1's parked chunk was written
  RunWakeups(wakeups);
  EXPECT_THAT(push.Offer(0, &w0, Chunk(data, spec, 2, 2, 1), &wakeups), IsOkAndHolds(false));
  // Stream 0 owes nothing more: it waits for stream 1's layer 3 instead of failing.
  EXPECT_THAT(push.EndStream(0, &w0, &wakeups), IsOkAndHolds(true));
  EXPECT_THAT(push.Offer(1, &w1, Chunk(data, spec, 3, 2, 1), &wakeups), IsOkAndHolds(false));
  EXPECT_EQ(receiver.counts().end, 1);
  EXPECT_EQ(receiver.counts().abort, 0);
  EXPECT_EQ(receiver.reservation("r1").bytes, data.Expected(3));
}

TEST_F(PushAssemblerRangesTest, ChunkSpanningTwoRangesFailsThePush) {
  auto push = registry.Join(Info(spec, 0, 1));
  ASSERT_TRUE(push.ok());
  RecordingWaiter w;
  KvStreamWakeups wakeups;
  absl::StatusOr<bool> result = (*push)->Offer(0, &w, Chunk(data, spec, 0, 0, 3), &wakeups);
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(result.status().message().find("spans two ranges"), std::string::npos);
  EXPECT_EQ(receiver.counts().abort, 1);
}

TEST_F(PushAssemblerRangesTest, StreamEndingWhileRangesRemainFailsThePush) {
  auto s0 = registry.Join(Info(spec, 0, 2));
  ASSERT_TRUE(s0.ok() && registry.Join(Info(spec, 1, 2)).ok());
  RecordingWaiter w0;
  KvStreamWakeups wakeups;
  EXPECT_THAT((*s0)->Offer(0, &w0, Chunk(data, spec, 0, 0, 2), &wakeups), IsOkAndHolds(false));
  // Stream 0's layer 0 of range [2,3) never came.
  EXPECT_EQ((*s0)->EndStream(0, &w0, &wakeups).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(receiver.counts().abort, 1);
}

TEST_F(PushAssemblerTest, SecondPushToAReceivingReservationIsFailedPrecondition) {
  auto first = registry_.Join(Info(spec_, 0, 1));
  ASSERT_TRUE(first.ok());
  auto second = registry_.Join(Info(spec_, 0, 1));
  EXPECT_EQ(second.status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST_F(PushAssemblerTest, StreamsDisagreeingOnTheHeaderIsInvalidArgument) {
  ASSERT_TRUE(registry_.Join(Info(spec_, 0, 2)).ok());
  KvPushSpec other = spec_;
  other.n_tokens = 20;
  EXPECT_EQ(registry_.Join(Info(other, 1, 2)).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(PushAssemblerTest, BeginPushErrorReachesEveryStream) {
  KvPushSpec wrong = spec_;
  wrong.model_fingerprint = "other-model";
  EXPECT_EQ(registry_.Join(Info(wrong, 0, 1)).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(registry_.Join(Info(MakeSpec("nope"), 0, 1)).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(receiver_.counts().abort, 0);  // nothing began, nothing to abort
  EXPECT_EQ(registry_.size(), 0u);
}

TEST_F(PushAssemblerTest, LayerOnTheWrongStreamFailsThePush) {
  auto push = registry_.Join(Info(spec_, 0, 2));
  ASSERT_TRUE(push.ok());
  RecordingWaiter w;
  KvStreamWakeups wakeups;
  absl::StatusOr<bool> result = (*push)->Offer(0, &w, Chunk(data_, spec_, 1, 0, 3), &wakeups);
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(receiver_.counts().abort, 1);
}

TEST_F(PushAssemblerTest, GapInALayerFailsThePush) {
  auto push = registry_.Join(Info(spec_, 0, 1));
  ASSERT_TRUE(push.ok());
  RecordingWaiter w;
  KvStreamWakeups wakeups;
  EXPECT_THAT((*push)->Offer(0, &w, Chunk(data_, spec_, 0, 0, 1), &wakeups), IsOkAndHolds(false));
  absl::StatusOr<bool> result = (*push)->Offer(0, &w, Chunk(data_, spec_, 0, 2, 1), &wakeups);
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(receiver_.counts().abort, 1);
  EXPECT_EQ(receiver_.reservation("r1").state, FakeReceiver::State::kAborted);
}

TEST_F(PushAssemblerTest, StreamEndingEarlyFailsThePush) {
  auto push = registry_.Join(Info(spec_, 0, 1));
  ASSERT_TRUE(push.ok());
  RecordingWaiter w;
  KvStreamWakeups wakeups;
  EXPECT_THAT((*push)->Offer(0, &w, Chunk(data_, spec_, 0, 0, 3), &wakeups), IsOkAndHolds(false));
  EXPECT_EQ((*push)->EndStream(0, &w, &wakeups).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(receiver_.counts().abort, 1);
  EXPECT_EQ(receiver_.counts().end, 0);
}

TEST_F(PushAssemblerTest, StreamWaitingForTheOthersBreakingFailsThePush) {
  auto push = registry_.Join(Info(spec_, 0, 4));
  ASSERT_TRUE(push.ok());
  RecordingWaiter w;
  KvStreamWakeups wakeups;
  // Stream 0 carries only layer 0; the other three streams never come.
  EXPECT_THAT((*push)->Offer(0, &w, Chunk(data_, spec_, 0, 0, 3), &wakeups), IsOkAndHolds(false));
  EXPECT_THAT((*push)->EndStream(0, &w, &wakeups), IsOkAndHolds(true));
  EXPECT_EQ(registry_.size(), 1u);
  // Its deadline cancels it: the push fails and leaves the registry.
  EXPECT_TRUE((*push)->BreakStream(0, absl::DeadlineExceededError("late"), &wakeups));
  EXPECT_TRUE(wakeups.empty());
  EXPECT_EQ(receiver_.counts().abort, 1);
  EXPECT_EQ(registry_.size(), 0u);
}

TEST_F(PushAssemblerTest, BrokenStreamAbortsOnceAndWakesParkedStreamsWithTheReason) {
  auto push = registry_.Join(Info(spec_, 0, 3));
  ASSERT_TRUE(push.ok()) << push.status();
  ASSERT_TRUE(registry_.Join(Info(spec_, 1, 3)).ok());
  ASSERT_TRUE(registry_.Join(Info(spec_, 2, 3)).ok());
  RecordingWaiter w1, w2;
  KvStreamWakeups wakeups;
  EXPECT_THAT((*push)->Offer(1, &w1, Chunk(data_, spec_, 1, 0, 3), &wakeups), IsOkAndHolds(true));
  EXPECT_THAT((*push)->Offer(2, &w2, Chunk(data_, spec_, 2, 0, 3), &wakeups), IsOkAndHolds(true));
  // Stream 2 itself breaks: it was parked, so it is not woken; stream 1 is, with the reason.
  EXPECT_TRUE((*push)->BreakStream(2, absl::CancelledError("gone"), &wakeups));
  ASSERT_EQ(wakeups.size(), 1u);
  EXPECT_EQ(wakeups[0].waiter, &w1);
  EXPECT_EQ(wakeups[0].status.code(), absl::StatusCode::kCancelled);
  EXPECT_FALSE((*push)->BreakStream(2, absl::CancelledError("again"), &wakeups));
  EXPECT_FALSE((*push)->BreakStream(0, absl::CancelledError("other"), &wakeups));
  EXPECT_EQ(receiver_.counts().abort, 1);
  EXPECT_EQ(receiver_.reservation("r1").abort_reason.message(), "gone");
  EXPECT_EQ(receiver_.counts().write, 0);
}

TEST_F(PushAssemblerTest, ReceiverWriteErrorFailsThePush) {
  auto push = registry_.Join(Info(spec_, 0, 1));
  ASSERT_TRUE(push.ok());
  RecordingWaiter w;
  KvStreamWakeups wakeups;
  ReceivedChunk too_many = Chunk(data_, spec_, 0, 0, 3);
  too_many.n_blocks = 4;  // past the push's 3 blocks
  EXPECT_EQ((*push)->Offer(0, &w, std::move(too_many), &wakeups).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(receiver_.counts().abort, 1);
}

}  // namespace
}  // namespace baton::kvtransfer
