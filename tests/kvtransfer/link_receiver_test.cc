// The receiving end of links: receives in the link's order whatever order they are asked for
// in, a bound on every wait, a link broken for good by any failure (link_receiver.h); and the
// acceptor's limits on the links it keeps (link_acceptor.h). Over the host-memory test link.
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "kvtransfer/link_acceptor.h"
#include "kvtransfer/link_receiver.h"
#include "tests/kvtransfer/host_link.h"

namespace baton::kvtransfer {
namespace {

using ::baton::kvtransfer::testing::HostLinkFactory;

constexpr size_t kBytes = 256;

std::vector<uint8_t> Pattern(uint8_t seed) {
  std::vector<uint8_t> bytes(kBytes);
  for (size_t i = 0; i < kBytes; ++i) bytes[i] = static_cast<uint8_t>(seed + i * 3);
  return bytes;
}

class LinkReceiverTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string bootstrap;
    auto sender = links_.Offer(&bootstrap);
    ASSERT_TRUE(sender.ok());
    sender_ = *std::move(sender);
    auto receiver = links_.Accept(bootstrap);
    ASSERT_TRUE(receiver.ok());
    receiver_ = std::make_unique<LinkReceiver>("L", *std::move(receiver));
  }

  absl::Status Send(const std::vector<uint8_t>& bytes) {
    const uint8_t* block = bytes.data();
    return sender_->PostSend({&block, 1}, kBytes);
  }
  absl::Status Receive(uint64_t sequence, std::vector<uint8_t>& into, absl::Duration within) {
    uint8_t* block = into.data();
    return receiver_->Receive(sequence, {&block, 1}, kBytes, absl::Now() + within);
  }

  HostLinkFactory links_;
  std::unique_ptr<LinkEndpoint> sender_;
  std::unique_ptr<LinkReceiver> receiver_;
};

TEST_F(LinkReceiverTest, ATransferAskedForBeforeItsTurnWaitsForTheOnesBeforeIt) {
  const std::vector<uint8_t> first = Pattern(1), second = Pattern(2);
  std::vector<uint8_t> got_first(kBytes), got_second(kBytes);
  absl::Status second_status;
  // The second push's announcement came first (another stream, another thread).
  std::thread later([&] { second_status = Receive(2, got_second, absl::Seconds(10)); });
  absl::SleepFor(absl::Milliseconds(20));
  ASSERT_TRUE(Send(first).ok());
  ASSERT_TRUE(Send(second).ok());
  EXPECT_TRUE(Receive(1, got_first, absl::Seconds(10)).ok());
  later.join();
  EXPECT_TRUE(second_status.ok()) << second_status;
  EXPECT_EQ(got_first, first);
  EXPECT_EQ(got_second, second);
  EXPECT_FALSE(receiver_->broken());
}

TEST_F(LinkReceiverTest, ATurnThatNeverComesBreaksTheLinkWithinItsBound) {
  std::vector<uint8_t> into(kBytes);
  const absl::Time start = absl::Now();
  absl::Status waited = Receive(3, into, absl::Milliseconds(100));
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  EXPECT_EQ(waited.code(), absl::StatusCode::kUnavailable) << waited;
  EXPECT_NE(waited.message().find("waited in vain for transfer 1"), std::string::npos) << waited;
  EXPECT_TRUE(receiver_->broken());
  // Broken for good: the transfer whose turn it was fails at once too.
  EXPECT_EQ(Receive(1, into, absl::Seconds(10)).code(), absl::StatusCode::kUnavailable);
}

TEST_F(LinkReceiverTest, ATransferThatNeverArrivesBreaksTheLinkWithinItsBound) {
  std::vector<uint8_t> into(kBytes);
  absl::Status waited = Receive(1, into, absl::Milliseconds(100));  // nothing was sent
  EXPECT_EQ(waited.code(), absl::StatusCode::kUnavailable) << waited;
  EXPECT_TRUE(receiver_->broken());
  EXPECT_FALSE(sender_->PostSend({}, kBytes).ok());  // the endpoint was aborted
}

TEST_F(LinkReceiverTest, ASequenceSeenTwiceBreaksTheLink) {
  const std::vector<uint8_t> bytes = Pattern(7);
  std::vector<uint8_t> into(kBytes);
  ASSERT_TRUE(Send(bytes).ok());
  ASSERT_TRUE(Receive(1, into, absl::Seconds(10)).ok());
  absl::Status again = Receive(1, into, absl::Seconds(10));
  EXPECT_EQ(again.code(), absl::StatusCode::kUnavailable) << again;
  EXPECT_TRUE(receiver_->broken());
}

TEST_F(LinkReceiverTest, BreakEndsAReceiveWaitingForItsTurn) {
  std::vector<uint8_t> into(kBytes);
  absl::Status waited;
  std::thread waiting([&] { waited = Receive(2, into, absl::Seconds(60)); });
  absl::SleepFor(absl::Milliseconds(20));
  const absl::Time start = absl::Now();
  receiver_->Break(absl::CancelledError("going away"));
  waiting.join();
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  EXPECT_EQ(waited.code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(waited.message().find("going away"), std::string::npos) << waited;
}

// ---- LinkAcceptor ----

v1::OpenKvLinkRequest Request(HostLinkFactory& links, const std::string& id) {
  v1::OpenKvLinkRequest request;
  request.set_link_id(id);
  request.set_kind("host");
  auto offered = links.Offer(request.mutable_bootstrap());
  EXPECT_TRUE(offered.ok());
  return request;
}

TEST(LinkAcceptorTest, KeepsAtMostMaxLinksAndBreaksTheLeastRecentlyUsed) {
  HostLinkFactory links;
  LinkAcceptor acceptor(&links, /*max_links=*/2);
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  ASSERT_TRUE(acceptor.Open(Request(links, "a"), deadline).ok());
  ASSERT_TRUE(acceptor.Open(Request(links, "b"), deadline).ok());
  absl::StatusOr<std::shared_ptr<LinkReceiver>> a = acceptor.Find("a");  // "a" used last
  ASSERT_TRUE(a.ok());
  ASSERT_TRUE(acceptor.Open(Request(links, "c"), deadline).ok());
  EXPECT_EQ(acceptor.Find("b").status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(acceptor.Find("a").ok());
  EXPECT_TRUE(acceptor.Find("c").ok());
  EXPECT_EQ(acceptor.size(), 2u);
  EXPECT_FALSE((*a)->broken());
}

TEST(LinkAcceptorTest, ALinkIdleTooLongIsBrokenAndForgotten) {
  HostLinkFactory links;
  // Long enough that a loaded machine finds the link before it goes idle.
  LinkAcceptor acceptor(&links, 16, /*idle_timeout=*/absl::Seconds(1));
  ASSERT_TRUE(acceptor.Open(Request(links, "idle"), absl::Now() + absl::Seconds(10)).ok());
  absl::StatusOr<std::shared_ptr<LinkReceiver>> link = acceptor.Find("idle");
  ASSERT_TRUE(link.ok());
  absl::SleepFor(absl::Milliseconds(1500));
  EXPECT_EQ(acceptor.Find("idle").status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE((*link)->broken());
  EXPECT_EQ(acceptor.size(), 0u);
}

TEST(LinkAcceptorTest, ANewLinkUnderAnOldIdBreaksTheOldOne) {
  HostLinkFactory links;
  LinkAcceptor acceptor(&links);
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  ASSERT_TRUE(acceptor.Open(Request(links, "same"), deadline).ok());
  absl::StatusOr<std::shared_ptr<LinkReceiver>> old = acceptor.Find("same");
  ASSERT_TRUE(old.ok());
  ASSERT_TRUE(acceptor.Open(Request(links, "same"), deadline).ok());
  EXPECT_TRUE((*old)->broken());
  absl::StatusOr<std::shared_ptr<LinkReceiver>> fresh = acceptor.Find("same");
  ASSERT_TRUE(fresh.ok());
  EXPECT_NE(fresh->get(), old->get());
}

}  // namespace
}  // namespace baton::kvtransfer
