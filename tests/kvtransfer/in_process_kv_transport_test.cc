#include <chrono>
#include <memory>
#include <vector>

#include "gtest/gtest.h"
#include "kvtransfer/kv_transport.h"
#include "tests/kvtransfer/fake_receiver.h"
#include "tests/kvtransfer/kv_test_util.h"

namespace baton::kvtransfer {
namespace {

using ::baton::kvtransfer::testing::FakeReceiver;
using ::baton::kvtransfer::testing::In;
using ::baton::kvtransfer::testing::KvData;
using ::baton::kvtransfer::testing::MakeSpec;
using ::baton::kvtransfer::testing::SendAll;
using std::chrono_literals::operator""ms;

class InProcessKvTransportTest : public ::testing::Test {
 protected:
  InProcessKvTransportTest()
      : spec_(MakeSpec("r1", 5, 70)),
        data_(spec_, 3),
        transport_(CreateInProcessKvTransport(&receiver_)) {
    receiver_.Reserve(spec_, 6);  // more reserved than pushed: room for generated tokens
  }

  KvPushSpec spec_;
  KvData data_;
  FakeReceiver receiver_;
  std::unique_ptr<KvTransport> transport_;
};

TEST_F(InProcessKvTransportTest, RoundTripIsByteIdentical) {
  auto push = transport_->StartPush("ignored", spec_, In(5000ms));
  ASSERT_TRUE(push.ok()) << push.status();
  for (int32_t layer = 0; layer < spec_.n_layer; ++layer) {
    ASSERT_TRUE((*push)->SendLayer(layer, data_.Layer(layer)).ok());
  }
  absl::StatusOr<KvPushStats> stats = (*push)->Finish();
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(stats->bytes_sent, spec_.total_bytes());
  EXPECT_EQ(stats->chunks_sent, spec_.n_layer);
  EXPECT_EQ(receiver_.reservation("r1").state, FakeReceiver::State::kReceived);
  EXPECT_EQ(receiver_.reservation("r1").bytes, data_.Expected(6));
  (*push)->Cancel();  // after a successful Finish: nothing to abandon
  push->reset();
  EXPECT_EQ(receiver_.counts().abort, 0);
  EXPECT_EQ(receiver_.counts().end, 1);
}

TEST_F(InProcessKvTransportTest, RangesArriveInThePushOrder) {
  KvPushSpec spec = MakeSpec("ranges", 3, 70);  // 5 blocks: ranges [0,2) [2,4) [4,5)
  spec.chunk_blocks = 2;
  const KvData data(spec, 9);
  receiver_.Reserve(spec, 5);
  auto push = transport_->StartPush("ignored", spec, In(5000ms));
  ASSERT_TRUE(push.ok()) << push.status();
  // Sending a whole layer when the push is in ranges is refused, and fails the push.
  EXPECT_EQ((*push)->SendLayer(0, data.Layer(0)).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(receiver_.reservation("ranges").state, FakeReceiver::State::kAborted);

  receiver_.Reserve(spec, 5);
  push = transport_->StartPush("ignored", spec, In(5000ms));
  ASSERT_TRUE(push.ok()) << push.status();
  ASSERT_TRUE(SendAll(**push, spec, data).ok());
  absl::StatusOr<KvPushStats> stats = (*push)->Finish();
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(stats->bytes_sent, spec.total_bytes());
  EXPECT_EQ(stats->chunks_sent, 3 * 3);  // a layer per range
  EXPECT_EQ(receiver_.reservation("ranges").bytes, data.Expected(5));
}

TEST_F(InProcessKvTransportTest, FinishBeforeTheLastRangeFails) {
  KvPushSpec spec = MakeSpec("short", 2, 40);  // 3 blocks: ranges [0,2) [2,3)
  spec.chunk_blocks = 2;
  const KvData data(spec, 1);
  receiver_.Reserve(spec, 3);
  auto push = transport_->StartPush("ignored", spec, In(5000ms));
  ASSERT_TRUE(push.ok());
  for (int32_t layer = 0; layer < 2; ++layer) {
    ASSERT_TRUE((*push)->SendLayer(layer, data.Range(layer, 0, 2)).ok());
  }
  EXPECT_EQ((*push)->Finish().status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(receiver_.reservation("short").state, FakeReceiver::State::kAborted);
}

TEST_F(InProcessKvTransportTest, BeginPushErrorComesFromStartPush) {
  KvPushSpec wrong = spec_;
  wrong.model_fingerprint = "other";
  EXPECT_EQ(transport_->StartPush("", wrong, In(5000ms)).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(transport_->StartPush("", MakeSpec("unknown"), In(5000ms)).status().code(),
            absl::StatusCode::kNotFound);
}

TEST_F(InProcessKvTransportTest, CancelAbortsOnce) {
  auto push = transport_->StartPush("", spec_, In(5000ms));
  ASSERT_TRUE(push.ok());
  ASSERT_TRUE((*push)->SendLayer(0, data_.Layer(0)).ok());
  (*push)->Cancel();
  (*push)->Cancel();
  push->reset();
  EXPECT_EQ(receiver_.counts().abort, 1);
  EXPECT_EQ(receiver_.reservation("r1").abort_reason.code(), absl::StatusCode::kCancelled);
}

TEST_F(InProcessKvTransportTest, DroppingAnUnfinishedPushAborts) {
  auto push = transport_->StartPush("", spec_, In(5000ms));
  ASSERT_TRUE(push.ok());
  push->reset();
  EXPECT_EQ(receiver_.counts().abort, 1);
}

TEST_F(InProcessKvTransportTest, BadLayerFailsAndAborts) {
  auto push = transport_->StartPush("", spec_, In(5000ms));
  ASSERT_TRUE(push.ok());
  std::vector<const uint8_t*> too_few = data_.Layer(0);
  too_few.pop_back();
  EXPECT_EQ((*push)->SendLayer(0, too_few).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(receiver_.counts().abort, 1);
  EXPECT_EQ((*push)->SendLayer(0, data_.Layer(0)).code(), absl::StatusCode::kFailedPrecondition);
  (*push)->Cancel();
  EXPECT_EQ(receiver_.counts().abort, 1);
}

TEST_F(InProcessKvTransportTest, FinishBeforeEveryLayerFails) {
  auto push = transport_->StartPush("", spec_, In(5000ms));
  ASSERT_TRUE(push.ok());
  ASSERT_TRUE((*push)->SendLayer(0, data_.Layer(0)).ok());
  EXPECT_EQ((*push)->Finish().status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(receiver_.counts().abort, 1);
  EXPECT_EQ(receiver_.counts().end, 0);
}

// `ready` is called, with the push's deadline, before the blocks are written; its error fails
// the push and aborts the reservation.
TEST_F(InProcessKvTransportTest, BlocksAreWrittenOnlyOnceReady) {
  const auto deadline = In(5000ms);
  auto push = transport_->StartPush("", spec_, deadline);
  ASSERT_TRUE(push.ok());
  int writes_seen_by_ready = -1;
  auto ready = [&](std::chrono::system_clock::time_point bound) {
    EXPECT_EQ(bound, deadline);
    writes_seen_by_ready = receiver_.counts().write;
    return absl::OkStatus();
  };
  ASSERT_TRUE((*push)->SendLayer(0, data_.Layer(0), ready).ok());
  EXPECT_EQ(writes_seen_by_ready, 0);
  EXPECT_EQ(receiver_.counts().write, 1);
  auto broken = [](std::chrono::system_clock::time_point) {
    return absl::InternalError("copy to the host failed");
  };
  EXPECT_EQ((*push)->SendLayer(1, data_.Layer(1), broken).code(), absl::StatusCode::kInternal);
  EXPECT_EQ(receiver_.counts().write, 1);
  EXPECT_EQ(receiver_.counts().abort, 1);
}

TEST_F(InProcessKvTransportTest, PassedDeadlineFails) {
  auto push = transport_->StartPush("", spec_, In(-1ms));
  ASSERT_TRUE(push.ok());
  EXPECT_EQ((*push)->SendLayer(0, data_.Layer(0)).code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(receiver_.counts().abort, 1);
}

}  // namespace
}  // namespace baton::kvtransfer
