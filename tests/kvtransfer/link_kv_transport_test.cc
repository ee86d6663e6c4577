// Pushes over links (kv_link.h) against a real KvTransfer server on 127.0.0.1: the control path
// (OpenKvLink, announcements on PushKv, ordering across pushes, breaking and reopening links)
// is the production code; the bytes travel over a test link in host memory (host_link.h), as
// NCCL's would between GPUs.
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "baton/v1/kv_transfer.grpc.pb.h"
#include "gtest/gtest.h"
#include "kvtransfer/kv_transport.h"
#include "kvtransfer/kv_wire.h"
#include "kvtransfer/link_acceptor.h"
#include "rpc/server_options.h"
#include "rpc/status.h"
#include "tests/kvtransfer/fake_receiver.h"
#include "tests/kvtransfer/host_link.h"
#include "tests/kvtransfer/kv_test_util.h"

namespace baton::kvtransfer {
namespace {

using ::baton::kvtransfer::testing::FakeReceiver;
using ::baton::kvtransfer::testing::HostLinkFactory;
using ::baton::kvtransfer::testing::In;
using ::baton::kvtransfer::testing::KvData;
using ::baton::kvtransfer::testing::MakeSpec;
using ::baton::kvtransfer::testing::SendAll;
using ::baton::kvtransfer::testing::TestKvServer;
using std::chrono_literals::operator""ms;

// A receiver that takes host links, and a sender's link transport to it.
struct LinkedPair {
  HostLinkFactory links;
  LinkAcceptor acceptor{&links};
  TestKvServer server{"", 64 << 20, &acceptor};
  std::unique_ptr<KvTransport> transport = CreateLinkKvTransport(&links, {});

  FakeReceiver& receiver() { return server.receiver(); }
};

absl::StatusOr<KvPushStats> PushAll(KvTransport& transport, const std::string& address,
                                    const KvPushSpec& spec, const KvData& data) {
  auto push = transport.StartPush(address, spec, In(10000ms));
  if (!push.ok()) return push.status();
  if (absl::Status sent = SendAll(**push, spec, data); !sent.ok()) return sent;
  return (*push)->Finish();
}

TEST(LinkKvTransportTest, PushArrivesByteIdenticalOverTheLink) {
  LinkedPair pair;
  KvPushSpec spec = MakeSpec("r1", 5, 70);
  spec.chunk_blocks = 2;  // several ranges: chunked prefill's order
  const KvData data(spec, 3);
  pair.receiver().Reserve(spec, 5);
  auto push = pair.transport->StartPush(pair.server.address(), spec, In(10000ms));
  ASSERT_TRUE(push.ok()) << push.status();
  EXPECT_EQ((*push)->transport_name(), "host");
  EXPECT_TRUE((*push)->reads_device_memory());
  ASSERT_TRUE(SendAll(**push, spec, data).ok());
  absl::StatusOr<KvPushStats> stats = (*push)->Finish();
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(stats->bytes_sent, spec.total_bytes());
  EXPECT_EQ(pair.receiver().reservation("r1").bytes, data.Expected(5));
  EXPECT_EQ(pair.receiver().reservation("r1").state, FakeReceiver::State::kReceived);
  bool released = false;
  (*push)->WhenBlocksReleased([&] { released = true; });
  EXPECT_TRUE(released);
}

TEST(LinkKvTransportTest, PushesOneAfterAnotherAndAtOnceShareOneLink) {
  LinkedPair pair;
  std::vector<KvPushSpec> specs;
  std::vector<std::unique_ptr<KvData>> data;
  for (int i = 0; i < 3; ++i) {
    specs.push_back(MakeSpec(absl::StrCat("r", i), 4, 50));
    data.push_back(std::make_unique<KvData>(specs.back(), 10 + i));
    pair.receiver().Reserve(specs.back(), 4);
  }
  ASSERT_TRUE(PushAll(*pair.transport, pair.server.address(), specs[0], *data[0]).ok());
  // Two pushes interleaved layer by layer, as a prefill batch sends them.
  auto a = pair.transport->StartPush(pair.server.address(), specs[1], In(10000ms));
  auto b = pair.transport->StartPush(pair.server.address(), specs[2], In(10000ms));
  ASSERT_TRUE(a.ok() && b.ok());
  for (int32_t layer = 0; layer < 4; ++layer) {
    ASSERT_TRUE((*a)->SendLayer(layer, data[1]->Layer(layer)).ok());
    ASSERT_TRUE((*b)->SendLayer(layer, data[2]->Layer(layer)).ok());
  }
  ASSERT_TRUE((*b)->Finish().ok());
  ASSERT_TRUE((*a)->Finish().ok());
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(pair.receiver().reservation(specs[i].reservation_id).bytes, data[i]->Expected(4));
  }
  EXPECT_EQ(pair.links.offers(), 1);
  EXPECT_EQ(pair.acceptor.size(), 1u);
}

TEST(LinkKvTransportTest, CancelMidPushFreesTheReservationAndKeepsTheLink) {
  LinkedPair pair;
  const KvPushSpec spec = MakeSpec("gone", 4, 50);
  const KvData data(spec, 1);
  pair.receiver().Reserve(spec, 4);
  {
    auto push = pair.transport->StartPush(pair.server.address(), spec, In(10000ms));
    ASSERT_TRUE(push.ok());
    ASSERT_TRUE((*push)->SendLayer(0, data.Layer(0)).ok());
    ASSERT_TRUE((*push)->SendLayer(1, data.Layer(1)).ok());
    (*push)->Cancel();
  }
  ASSERT_TRUE(pair.receiver().WaitForAborts(1));
  EXPECT_EQ(pair.receiver().reservation("gone").state, FakeReceiver::State::kAborted);
  // The link is still in step: the next push goes over it.
  const KvPushSpec next = MakeSpec("next", 4, 50);
  const KvData next_data(next, 2);
  pair.receiver().Reserve(next, 4);
  ASSERT_TRUE(PushAll(*pair.transport, pair.server.address(), next, next_data).ok());
  EXPECT_EQ(pair.receiver().reservation("next").bytes, next_data.Expected(4));
  EXPECT_EQ(pair.links.offers(), 1);
}

TEST(LinkKvTransportTest, BlocksThatNeverBecomeReadyFailThePushButNotTheLink) {
  LinkedPair pair;
  const KvPushSpec spec = MakeSpec("bad", 3, 32);
  const KvData data(spec, 4);
  pair.receiver().Reserve(spec, 2);
  auto push = pair.transport->StartPush(pair.server.address(), spec, In(10000ms));
  ASSERT_TRUE(push.ok());
  ASSERT_TRUE((*push)->SendLayer(0, data.Layer(0)).ok());
  auto broken_copy = [](std::chrono::system_clock::time_point) {
    return absl::InternalError("the device's copy failed");
  };
  (void)(*push)->SendLayer(1, data.Layer(1), broken_copy);
  (void)(*push)->SendLayer(2, data.Layer(2));
  absl::StatusOr<KvPushStats> finished = (*push)->Finish();
  ASSERT_FALSE(finished.ok());
  EXPECT_NE(finished.status().message().find("the device's copy failed"), std::string::npos)
      << finished.status();
  ASSERT_TRUE(pair.receiver().WaitForAborts(1));
  const KvPushSpec next = MakeSpec("after", 3, 32);
  const KvData next_data(next, 5);
  pair.receiver().Reserve(next, 2);
  ASSERT_TRUE(PushAll(*pair.transport, pair.server.address(), next, next_data).ok());
  EXPECT_EQ(pair.links.offers(), 1);
}

TEST(LinkKvTransportTest, AReceiverSideFailureBreaksTheLinkAndTheNextPushOpensANewOne) {
  LinkedPair pair;
  // The reservation is made anew midway (as if freed and reserved again): the receiver refuses
  // the next chunk, whose bytes the sender has posted on the link already.
  const KvPushSpec spec = MakeSpec("swapped", 4, 50);
  const KvData data(spec, 6);
  pair.receiver().Reserve(spec, 4);
  auto push = pair.transport->StartPush(pair.server.address(), spec, In(10000ms));
  ASSERT_TRUE(push.ok());
  ASSERT_TRUE((*push)->SendLayer(0, data.Layer(0)).ok());
  const absl::Time give_up = absl::Now() + absl::Seconds(10);
  while (pair.receiver().reservation("swapped").n_written < size_t(spec.n_blocks()) &&
         absl::Now() < give_up) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  ASSERT_EQ(pair.receiver().reservation("swapped").n_written, size_t(spec.n_blocks()));
  pair.receiver().Reserve(spec, 4);  // back to reserved: the next chunk is refused
  for (int32_t layer = 1; layer < 4; ++layer) (void)(*push)->SendLayer(layer, data.Layer(layer));
  absl::StatusOr<KvPushStats> finished = (*push)->Finish();
  EXPECT_FALSE(finished.ok());
  push->reset();
  const KvPushSpec next = MakeSpec("fresh", 4, 50);
  const KvData next_data(next, 7);
  pair.receiver().Reserve(next, 4);
  absl::StatusOr<KvPushStats> again = PushAll(*pair.transport, pair.server.address(), next,
                                              next_data);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(pair.receiver().reservation("fresh").bytes, next_data.Expected(4));
  EXPECT_EQ(pair.links.offers(), 2);
}

// NCCL completes small sends before the peer posts its receive: a push the receiver refuses
// at its header may have "sent" transfers nobody will receive. Both ends must break the link.
TEST(LinkKvTransportTest, APushRefusedOnALiveLinkBreaksBothEndsEvenWhenSendsAreBuffered) {
  LinkedPair pair;
  pair.links.set_buffered_sends(true);
  const KvPushSpec first = MakeSpec("first", 3, 40);
  const KvData first_data(first, 13);
  pair.receiver().Reserve(first, 3);
  ASSERT_TRUE(PushAll(*pair.transport, pair.server.address(), first, first_data).ok());
  ASSERT_EQ(pair.acceptor.size(), 1u);

  const KvPushSpec ghost = MakeSpec("never-reserved", 3, 40);
  const KvData ghost_data(ghost, 14);
  absl::StatusOr<KvPushStats> refused =
      PushAll(*pair.transport, pair.server.address(), ghost, ghost_data);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(pair.acceptor.size(), 0u);  // the receiver's end broke

  const KvPushSpec next = MakeSpec("next", 3, 40);
  const KvData next_data(next, 15);
  pair.receiver().Reserve(next, 3);
  absl::StatusOr<KvPushStats> again = PushAll(*pair.transport, pair.server.address(), next,
                                              next_data);
  ASSERT_TRUE(again.ok()) << again.status();  // over a new link, not stuck behind the old one
  EXPECT_EQ(pair.receiver().reservation("next").bytes, next_data.Expected(3));
  EXPECT_EQ(pair.links.offers(), 2);
}

TEST(LinkKvTransportTest, AReceiverThatGoesAwayMidPushFailsThePushAndBreaksTheLink) {
  HostLinkFactory links;
  LinkAcceptor acceptor(&links);
  auto server = std::make_unique<TestKvServer>("", 64 << 20, &acceptor);
  const std::string address = server->address();
  const KvPushSpec spec = MakeSpec("orphan", 4, 50);
  const KvData data(spec, 12);
  server->receiver().Reserve(spec, 4);
  auto transport = CreateLinkKvTransport(&links, {});
  auto push = transport->StartPush(address, spec, In(20000ms));
  ASSERT_TRUE(push.ok()) << push.status();
  ASSERT_TRUE((*push)->SendLayer(0, data.Layer(0)).ok());
  ASSERT_TRUE(server->receiver().WaitForWrites(1));
  server.reset();  // the decode worker is gone: its calls are cancelled
  for (int32_t layer = 1; layer < 4; ++layer) (void)(*push)->SendLayer(layer, data.Layer(layer));
  absl::StatusOr<KvPushStats> finished = (*push)->Finish();
  EXPECT_FALSE(finished.ok());
  absl::Notification released;
  (*push)->WhenBlocksReleased([&] { released.Notify(); });
  push->reset();
  // Nothing reads the sender's blocks any more (the link's thread may say so just after).
  EXPECT_TRUE(released.WaitForNotificationWithTimeout(absl::Seconds(10)));
  EXPECT_EQ(acceptor.size(), 0u);  // the receiver's end broke with its push
}

TEST(LinkKvTransportTest, AReceiverWithoutLinksRefusesAndAutoFallsBackToGrpc) {
  TestKvServer server;  // takes no links
  HostLinkFactory links;
  const KvPushSpec spec = MakeSpec("plain", 3, 40);
  const KvData data(spec, 8);
  server.receiver().Reserve(spec, 3);
  auto link_only = CreateLinkKvTransport(&links, {});
  absl::StatusOr<std::unique_ptr<KvPush>> refused =
      link_only->StartPush(server.address(), spec, In(10000ms));
  ASSERT_EQ(refused.status().code(), absl::StatusCode::kUnimplemented) << refused.status();
  EXPECT_NE(refused.status().message().find("takes no KV over links"), std::string::npos);

  auto transport = CreateAutoKvTransport(CreateLinkKvTransport(&links, {}),
                                         CreateGrpcKvTransport({}), {.recheck_after = 60000ms});
  EXPECT_EQ(transport->name(), "auto");
  auto push = transport->StartPush(server.address(), spec, In(10000ms));
  ASSERT_TRUE(push.ok()) << push.status();
  EXPECT_EQ((*push)->transport_name(), "grpc");
  ASSERT_TRUE(SendAll(**push, spec, data).ok());
  ASSERT_TRUE((*push)->Finish().ok());
  EXPECT_EQ(server.receiver().reservation("plain").bytes, data.Expected(3));
  // Remembered: the next push does not ask again.
  const int offers = links.offers();
  const KvPushSpec second = MakeSpec("plain2", 3, 40);
  server.receiver().Reserve(second, 3);
  auto again = transport->StartPush(server.address(), second, In(10000ms));
  ASSERT_TRUE(again.ok());
  EXPECT_EQ((*again)->transport_name(), "grpc");
  EXPECT_EQ(links.offers(), offers);
  (*again)->Cancel();
}

TEST(LinkKvTransportTest, AutoUsesTheLinkWhereTheReceiverTakesIt) {
  LinkedPair pair;
  HostLinkFactory* links = &pair.links;
  auto transport = CreateAutoKvTransport(CreateLinkKvTransport(links, {}),
                                         CreateGrpcKvTransport({}));
  const KvPushSpec spec = MakeSpec("linked", 3, 40);
  const KvData data(spec, 9);
  pair.receiver().Reserve(spec, 3);
  auto push = transport->StartPush(pair.server.address(), spec, In(10000ms));
  ASSERT_TRUE(push.ok()) << push.status();
  EXPECT_EQ((*push)->transport_name(), "host");
  ASSERT_TRUE(SendAll(**push, spec, data).ok());
  ASSERT_TRUE((*push)->Finish().ok());
  EXPECT_EQ(pair.receiver().reservation("linked").bytes, data.Expected(3));
}

// --kv-transport auto: the engine thread never waits for a link to open; the first pushes go
// over gRPC meanwhile.
TEST(LinkKvTransportTest, AutoPushesOverGrpcWhileTheLinkOpensThenOverTheLink) {
  LinkedPair pair;
  absl::StatusOr<std::unique_ptr<KvTransport>> transport = CreateChosenKvTransport(
      KvTransportChoice::kAuto, {}, &pair.links, absl::OkStatus());
  ASSERT_TRUE(transport.ok());
  std::string went_over;
  for (int i = 0; i < 1000 && went_over != "host"; ++i) {
    const KvPushSpec spec = MakeSpec(absl::StrCat("r", i), 3, 40);
    const KvData data(spec, 20 + i);
    pair.receiver().Reserve(spec, 3);
    auto push = (*transport)->StartPush(pair.server.address(), spec, In(10000ms));
    ASSERT_TRUE(push.ok()) << push.status();
    went_over = (*push)->transport_name();
    if (i == 0) {
      EXPECT_EQ(went_over, "grpc");  // the link had not been asked for before
    }
    ASSERT_TRUE(SendAll(**push, spec, data).ok());
    ASSERT_TRUE((*push)->Finish().ok());
    EXPECT_EQ(pair.receiver().reservation(spec.reservation_id).bytes, data.Expected(3));
    if (went_over != "host") absl::SleepFor(absl::Milliseconds(10));
  }
  EXPECT_EQ(went_over, "host");
  EXPECT_EQ(pair.links.offers(), 1);
}

TEST(LinkKvTransportTest, AutoAsksAReceiverWithoutLinksOnceInTheBackground) {
  TestKvServer server;  // takes no links
  HostLinkFactory links;
  absl::StatusOr<std::unique_ptr<KvTransport>> transport =
      CreateChosenKvTransport(KvTransportChoice::kAuto, {}, &links, absl::OkStatus());
  ASSERT_TRUE(transport.ok());
  for (int i = 0; i < 5; ++i) {
    const KvPushSpec spec = MakeSpec(absl::StrCat("p", i), 3, 40);
    const KvData data(spec, 30 + i);
    server.receiver().Reserve(spec, 3);
    auto push = (*transport)->StartPush(server.address(), spec, In(10000ms));
    ASSERT_TRUE(push.ok()) << push.status();
    EXPECT_EQ((*push)->transport_name(), "grpc");
    ASSERT_TRUE(SendAll(**push, spec, data).ok());
    ASSERT_TRUE((*push)->Finish().ok());
    absl::SleepFor(absl::Milliseconds(20));  // the refusal comes back meanwhile
  }
  EXPECT_EQ(links.offers(), 1);  // refused once, remembered
}

TEST(LinkKvTransportTest, NcclOnlyWithoutLinksIsRefusedSayingWhy) {
  absl::StatusOr<std::unique_ptr<KvTransport>> transport = CreateChosenKvTransport(
      KvTransportChoice::kNccl, {}, nullptr, absl::FailedPreconditionError("no GPU here"));
  ASSERT_FALSE(transport.ok());
  EXPECT_EQ(transport.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(transport.status().message().find("no GPU here"), std::string::npos);
  absl::StatusOr<std::unique_ptr<KvTransport>> grpc = CreateChosenKvTransport(
      KvTransportChoice::kAuto, {}, nullptr, absl::FailedPreconditionError("no GPU here"));
  ASSERT_TRUE(grpc.ok());
  EXPECT_EQ((*grpc)->name(), "grpc");
}

TEST(LinkKvTransportTest, ParsesTheTransportChoice) {
  EXPECT_EQ(*ParseKvTransportChoice("auto"), KvTransportChoice::kAuto);
  EXPECT_EQ(*ParseKvTransportChoice("grpc"), KvTransportChoice::kGrpc);
  EXPECT_EQ(*ParseKvTransportChoice("nccl"), KvTransportChoice::kNccl);
  absl::StatusOr<KvTransportChoice> bad = ParseKvTransportChoice("rdma");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("auto, grpc, nccl"), std::string::npos);
}

// ---- Hostile clients on the control path ----

class OpenKvLinkTest : public ::testing::Test {
 protected:
  absl::Status Open(const v1::OpenKvLinkRequest& request) {
    auto channel = rpc::MakeChannel(pair_.server.address(), {});
    EXPECT_TRUE(channel.ok());
    auto stub = v1::KvTransfer::NewStub(*channel);
    grpc::ClientContext context;
    rpc::PrepareContext(context, {}, In(5000ms));
    v1::OpenKvLinkResponse response;
    return rpc::FromGrpcStatus(stub->OpenKvLink(&context, request, &response));
  }

  LinkedPair pair_;
};

TEST_F(OpenKvLinkTest, RefusesBadIdsKindsAndBootstraps) {
  v1::OpenKvLinkRequest request;
  request.set_kind("host");
  request.set_link_id("has a space");
  EXPECT_EQ(Open(request).code(), absl::StatusCode::kInvalidArgument);
  request.set_link_id(std::string(65, 'a'));
  EXPECT_EQ(Open(request).code(), absl::StatusCode::kInvalidArgument);
  request.set_link_id("ok-id");
  request.set_kind("rdma");
  absl::Status kind = Open(request);
  EXPECT_EQ(kind.code(), absl::StatusCode::kUnimplemented) << kind;
  EXPECT_NE(kind.message().find("'host' only"), std::string::npos) << kind;
  request.set_kind("host");
  request.set_bootstrap(std::string(5000, 'x'));
  EXPECT_EQ(Open(request).code(), absl::StatusCode::kInvalidArgument);
  request.set_bootstrap("12345");  // never offered
  EXPECT_EQ(Open(request).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(pair_.acceptor.size(), 0u);
}

TEST_F(OpenKvLinkTest, APushNamingAnUnknownLinkIsRefusedAndReservesNothing) {
  const KvPushSpec spec = MakeSpec("r", 2, 20);
  pair_.receiver().Reserve(spec, 2);
  auto channel = rpc::MakeChannel(pair_.server.address(), {});
  ASSERT_TRUE(channel.ok());
  auto stub = v1::KvTransfer::NewStub(*channel);
  grpc::ClientContext context;
  rpc::PrepareContext(context, {}, In(5000ms));
  v1::KvPushResponse response;
  auto writer = stub->PushKv(&context, &response);
  v1::KvPushMessage header;
  *header.mutable_header() = HeaderFromSpec(spec, 0, 1);
  header.mutable_header()->set_link_id("never-opened");
  writer->Write(header);
  writer->WritesDone();
  absl::Status status = rpc::FromGrpcStatus(writer->Finish());
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition) << status;
  EXPECT_NE(status.message().find("never-opened"), std::string::npos) << status;
  EXPECT_EQ(pair_.receiver().counts().begin, 0);
}

}  // namespace
}  // namespace baton::kvtransfer
