// The gRPC transport against a real KvTransfer server on 127.0.0.1.
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "kvtransfer/kv_transport.h"
#include "tests/kvtransfer/fake_receiver.h"
#include "tests/kvtransfer/kv_test_util.h"

namespace baton::kvtransfer {
namespace {

using ::baton::kvtransfer::testing::ReleaseBlocks;
using ::baton::kvtransfer::testing::FakeReceiver;
using ::baton::kvtransfer::testing::In;
using ::baton::kvtransfer::testing::KvData;
using ::baton::kvtransfer::testing::MakeSpec;
using ::baton::kvtransfer::testing::SendAll;
using ::baton::kvtransfer::testing::TestKvServer;
using std::chrono_literals::operator""ms;
using std::chrono_literals::operator""s;

// Options with the defaults except for what a test varies.
GrpcKvTransportOptions Options(int n_streams = 1, int64_t chunk_bytes = 1 << 20,
                               const std::string& token = "") {
  GrpcKvTransportOptions options;
  options.n_streams = n_streams;
  options.chunk_bytes = chunk_bytes;
  options.client.auth_token = token;
  return options;
}

// Sends everything in the push's order, then Finish; the first error wins (SendLayer may already see it).
absl::StatusOr<KvPushStats> PushAll(KvTransport& transport, const std::string& address,
                                    const KvPushSpec& spec, const KvData& data,
                                    std::chrono::milliseconds timeout = 10000ms) {
  auto push = transport.StartPush(address, spec, In(timeout));
  if (!push.ok()) return push.status();
  absl::Status sent = SendAll(**push, spec, data);
  absl::StatusOr<KvPushStats> finished = sent.ok() ? (*push)->Finish() : sent;
  if (!finished.ok()) (*push)->Cancel();
  EXPECT_TRUE(ReleaseBlocks(*std::move(push)));  // `data` may go once this returns
  return finished;
}

struct RoundTripCase {
  int n_streams;
  int64_t chunk_bytes;
  std::string name;
  int32_t chunk_blocks = 0;  // the push's block ranges (chunked prefill); 0: one range
  int32_t first_block = 0;   // blocks the receiver holds already (its prefix cache)
};

class GrpcRoundTripTest : public ::testing::TestWithParam<RoundTripCase> {};

TEST_P(GrpcRoundTripTest, ArrivesByteIdentical) {
  TestKvServer server;
  // 7 layers of 5 blocks (70 tokens, block 16), 512 bytes per block: a layer is 2560 bytes.
  KvPushSpec spec = MakeSpec("r1", 7, 70);
  spec.chunk_blocks = GetParam().chunk_blocks;
  spec.first_block = GetParam().first_block;
  const KvData data(spec, 11);
  server.receiver().Reserve(spec, 8);
  auto transport = CreateGrpcKvTransport(Options(GetParam().n_streams, GetParam().chunk_bytes));
  absl::StatusOr<KvPushStats> stats = PushAll(*transport, server.address(), spec, data);
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(stats->bytes_sent, spec.total_bytes());
  // Chunks never span two ranges: each range's layer is cut on its own.
  const int64_t per_chunk = std::min<int64_t>(GetParam().chunk_bytes / 512, spec.range_blocks());
  int64_t chunks_per_layer = 0;
  for (int32_t begin = spec.first_block; begin < 5; begin = spec.RangeEnd(begin)) {
    const int64_t blocks = spec.RangeEnd(begin) - begin;
    chunks_per_layer += (blocks + per_chunk - 1) / per_chunk;
  }
  EXPECT_EQ(stats->chunks_sent, spec.n_layer * chunks_per_layer);
  EXPECT_GT(stats->seconds, 0);
  const FakeReceiver::Reservation arrived = server.receiver().reservation("r1");
  EXPECT_EQ(arrived.state, FakeReceiver::State::kReceived);
  EXPECT_TRUE(arrived.bytes == data.Expected(8));
  EXPECT_EQ(server.receiver().counts().begin, 1);
  EXPECT_EQ(server.receiver().counts().end, 1);
  EXPECT_EQ(server.receiver().counts().abort, 0);
}

INSTANTIATE_TEST_SUITE_P(
    StreamsAndChunks, GrpcRoundTripTest,
    ::testing::Values(RoundTripCase{1, 1024, "OneStreamSmallChunks"},
                      RoundTripCase{1, 1 << 20, "OneStreamChunkLargerThanLayer"},
                      RoundTripCase{3, 1024, "ThreeStreamsSmallChunks"},
                      RoundTripCase{3, 1 << 20, "ThreeStreamsChunkLargerThanLayer"},
                      RoundTripCase{16, 512, "MoreStreamsThanLayersOneBlockChunks"},
                      RoundTripCase{1, 1 << 20, "OneStreamRangesOfTwoBlocks", 2},
                      RoundTripCase{3, 512, "ThreeStreamsRangesOfTwoBlocksOneBlockChunks", 2},
                      RoundTripCase{3, 1 << 20, "ThreeStreamsRangesOfOneBlock", 1},
                      RoundTripCase{2, 1 << 20, "RangeLargerThanThePrompt", 9},
                      RoundTripCase{1, 1 << 20, "ReceiverHoldsTwoBlocks", 0, 2},
                      RoundTripCase{3, 512, "ReceiverHoldsOneBlockRangesOfTwo", 2, 1},
                      RoundTripCase{2, 1024, "ReceiverHoldsAllButTheLastBlock", 2, 4}),
    [](const ::testing::TestParamInfo<RoundTripCase>& info) { return info.param.name; });

TEST(GrpcKvTransportTest, ConcurrentPushesShareTheTransport) {
  TestKvServer server;
  auto transport = CreateGrpcKvTransport(Options(2, 1024));
  constexpr int kPushes = 6;
  std::vector<KvPushSpec> specs;
  std::vector<KvData> datas;
  for (int i = 0; i < kPushes; ++i) {
    specs.push_back(MakeSpec(absl::StrCat("r", i), 5, 33 + i));
    datas.emplace_back(specs.back(), i);
    server.receiver().Reserve(specs.back(), 4);
  }
  std::vector<absl::Status> results(kPushes);
  std::vector<std::thread> threads;
  for (int i = 0; i < kPushes; ++i) {
    threads.emplace_back([&, i] {
      results[i] = PushAll(*transport, server.address(), specs[i], datas[i]).status();
    });
  }
  for (std::thread& t : threads) t.join();
  for (int i = 0; i < kPushes; ++i) {
    EXPECT_TRUE(results[i].ok()) << results[i];
    EXPECT_TRUE(server.receiver().reservation(specs[i].reservation_id).bytes ==
                datas[i].Expected(4));
  }
}

// The inodes of this process's sockets, read from the links in /proc/self/fd ("socket:[N]").
absl::flat_hash_set<std::string> OwnSocketInodes() {
  absl::flat_hash_set<std::string> inodes;
  for (const std::filesystem::directory_entry& fd :
       std::filesystem::directory_iterator("/proc/self/fd")) {
    std::error_code error;
    const std::string target = std::filesystem::read_symlink(fd.path(), error).string();
    constexpr std::string_view kSocket = "socket:[";
    if (!error && target.starts_with(kSocket)) {
      inodes.insert(target.substr(kSocket.size(), target.size() - kSocket.size() - 1));
    }
  }
  return inodes;
}

// This process's established TCP connections whose far end is `port`: the client sides of its
// connections to a server listening there (/proc/net/tcp and tcp6: gRPC's sockets are often IPv6
// ones that carry IPv4). Sockets of other processes are left out: a test running beside this one
// may hold a connection whose far end has the same port number on another address.
int ConnectionsTo(int port) {
  const absl::flat_hash_set<std::string> own = OwnSocketInodes();
  int n = 0;
  for (const char* table : {"/proc/net/tcp", "/proc/net/tcp6"}) {
    std::ifstream tcp(table);
    std::string line;
    std::getline(tcp, line);  // the header
    while (std::getline(tcp, line)) {
      std::istringstream fields(line);
      std::string slot, local, remote, state, queues, timer, retransmits, uid, timeout, inode;
      fields >> slot >> local >> remote >> state >> queues >> timer >> retransmits >> uid >>
          timeout >> inode;
      const int remote_port = std::stoi(remote.substr(remote.find(':') + 1), nullptr, 16);
      // 01: ESTABLISHED
      if (remote_port == port && state == "01" && own.contains(inode)) ++n;
    }
  }
  return n;
}

// ConnectionsTo(port) once it equals `expected`, or after 5 s its last count: a connection the
// transport replaces (a keepalive that timed out on a loaded machine) may linger for a moment.
int SettledConnectionsTo(int port, int expected) {
  const auto deadline = std::chrono::steady_clock::now() + 5s;
  int n = ConnectionsTo(port);
  while (n != expected && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(20ms);
    n = ConnectionsTo(port);
  }
  return n;
}

// Streams on one connection share its socket, read by one thread at each end: each stream of a
// push gets a connection of its own, kept for the later pushes to the same destination.
TEST(GrpcKvTransportTest, EachStreamHasAConnectionOfItsOwnKeptForLaterPushes) {
  TestKvServer server;
  const int port = std::stoi(server.address().substr(server.address().rfind(':') + 1));
  ASSERT_EQ(ConnectionsTo(port), 0);
  auto transport = CreateGrpcKvTransport(Options(3, 1024));
  for (int i = 0; i < 2; ++i) {
    const KvPushSpec spec = MakeSpec(absl::StrCat("r", i), 5, 40);
    server.receiver().Reserve(spec, 3);
    ASSERT_TRUE(PushAll(*transport, server.address(), spec, KvData(spec, i)).ok());
    EXPECT_EQ(SettledConnectionsTo(port, 3), 3) << "after push " << i;
  }
  // A push of fewer layers than streams uses as many streams as layers, on the same connections.
  const KvPushSpec two_layers = MakeSpec("r2", 2, 40);
  server.receiver().Reserve(two_layers, 3);
  ASSERT_TRUE(PushAll(*transport, server.address(), two_layers, KvData(two_layers, 2)).ok());
  EXPECT_EQ(SettledConnectionsTo(port, 3), 3);
}

TEST(GrpcKvTransportTest, ReceiverVerdictsReachTheSender) {
  TestKvServer server;
  const KvPushSpec spec = MakeSpec("r1", 4, 40);
  server.receiver().Reserve(spec, 3);
  auto transport = CreateGrpcKvTransport(Options(2));
  KvPushSpec wrong_model = spec;
  wrong_model.model_fingerprint = "another-model";
  absl::Status status =
      PushAll(*transport, server.address(), wrong_model, KvData(spec, 1)).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_NE(status.message().find("model_fingerprint"), std::string::npos) << status;

  const KvPushSpec unknown = MakeSpec("no-such-reservation", 4, 40);
  status = PushAll(*transport, server.address(), unknown, KvData(unknown, 1)).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound) << status;
  EXPECT_EQ(server.receiver().counts().write, 0);
  EXPECT_EQ(server.receiver().counts().end, 0);
  EXPECT_EQ(server.receiver().counts().abort, 0);  // nothing began
}

TEST(GrpcKvTransportTest, WrongTokenIsUnauthenticated) {
  TestKvServer server("s3cret");
  const KvPushSpec spec = MakeSpec("r1");
  server.receiver().Reserve(spec, 3);
  auto wrong = CreateGrpcKvTransport(Options(1, 1 << 20, "guess"));
  EXPECT_EQ(PushAll(*wrong, server.address(), spec, KvData(spec, 1)).status().code(),
            absl::StatusCode::kUnauthenticated);
  auto none = CreateGrpcKvTransport(Options());
  EXPECT_EQ(PushAll(*none, server.address(), spec, KvData(spec, 1)).status().code(),
            absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(server.receiver().counts().begin, 0);
  auto right = CreateGrpcKvTransport(Options(1, 1 << 20, "s3cret"));
  EXPECT_TRUE(PushAll(*right, server.address(), spec, KvData(spec, 1)).ok());
}

TEST(GrpcKvTransportTest, SenderCancellingMidwayAborts) {
  TestKvServer server;
  const KvPushSpec spec = MakeSpec("r1", 6, 40);
  const KvData data(spec, 5);
  server.receiver().Reserve(spec, 3);
  auto transport = CreateGrpcKvTransport(Options(2));
  auto push = transport->StartPush(server.address(), spec, In(10000ms));
  ASSERT_TRUE(push.ok());
  ASSERT_TRUE((*push)->SendLayer(0, data.Layer(0)).ok());
  ASSERT_TRUE((*push)->SendLayer(1, data.Layer(1)).ok());
  ASSERT_TRUE(server.receiver().WaitForWrites(2));
  (*push)->Cancel();
  ASSERT_TRUE(server.receiver().WaitForAborts(1));
  EXPECT_EQ(server.receiver().reservation("r1").state, FakeReceiver::State::kAborted);
  EXPECT_EQ(server.receiver().reservation("r1").abort_reason.code(), absl::StatusCode::kCancelled);
  EXPECT_FALSE((*push)->SendLayer(2, data.Layer(2)).ok());
  EXPECT_FALSE((*push)->Finish().ok());
  EXPECT_TRUE(ReleaseBlocks(*std::move(push)));
  EXPECT_EQ(server.receiver().counts().abort, 1);
  EXPECT_EQ(server.receiver().counts().end, 0);
}

// The messages point into the sender's blocks: after a successful Finish the network has let
// go of them; after a Cancel mid-push (the receiver stuck, data still queued) soon too.
TEST(GrpcKvTransportTest, TheBlocksAreReleasedAfterFinishAndAfterCancel) {
  TestKvServer server;
  const KvPushSpec spec = MakeSpec("r1", 4, 40);
  const KvData data(spec, 12);
  server.receiver().Reserve(spec, 3);
  auto transport = CreateGrpcKvTransport(Options(2, 1024));
  auto push = transport->StartPush(server.address(), spec, In(10000ms));
  ASSERT_TRUE(push.ok()) << push.status();
  ASSERT_TRUE(SendAll(**push, spec, data).ok());
  ASSERT_TRUE((*push)->Finish().ok());
  // (Shared: a late release must not outlive what it notifies.)
  auto released = std::make_shared<absl::Notification>();
  (*push)->WhenBlocksReleased([released] { released->Notify(); });
  EXPECT_TRUE(released->WaitForNotificationWithTimeout(absl::Seconds(5)));

  const KvPushSpec stuck_spec = MakeSpec("r2", 4, 40);
  server.receiver().Reserve(stuck_spec, 3);
  server.receiver().StallWrites();
  auto stuck = transport->StartPush(server.address(), stuck_spec, In(10000ms));
  ASSERT_TRUE(stuck.ok()) << stuck.status();
  ASSERT_TRUE(SendAll(**stuck, stuck_spec, data).ok());
  ASSERT_TRUE(server.receiver().WaitForWrites(1));
  (*stuck)->Cancel();
  // (The receiver's stalled handler holds one of gRPC's threads, which this process shares
  // with the sender: let it go, as a separate process's would not matter.)
  server.receiver().Release();
  auto stuck_released = std::make_shared<absl::Notification>();
  (*stuck)->WhenBlocksReleased([stuck_released] { stuck_released->Notify(); });
  EXPECT_TRUE(stuck_released->WaitForNotificationWithTimeout(absl::Seconds(5)));
  stuck->reset();
}

// The receiver stalls in its first WriteBlocks past the push's deadline, then recovers: the
// sender gets DEADLINE_EXCEEDED, and the receiver an abort, never an EndPush (with one layer the
// stalled write is the last one).
class StalledReceiverTest : public ::testing::TestWithParam<int32_t> {};

TEST_P(StalledReceiverTest, DeadlineExceededAndAborted) {
  TestKvServer server;
  const KvPushSpec spec = MakeSpec("r1", /*n_layer=*/GetParam(), 40);
  server.receiver().Reserve(spec, 3);
  server.receiver().StallWrites();
  auto transport = CreateGrpcKvTransport(Options());
  const KvData data(spec, 2);
  auto push = transport->StartPush(server.address(), spec, In(1000ms));
  ASSERT_TRUE(push.ok());
  for (int32_t layer = 0; layer < spec.n_layer; ++layer) {
    ASSERT_TRUE((*push)->SendLayer(layer, data.Layer(layer)).ok());
  }
  ASSERT_TRUE(server.receiver().WaitForWrites(1));  // the receiver is stuck in the first write
  absl::Status status = (*push)->Finish().status();
  EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded) << status;
  // The server's copy of the deadline (sent as a rounded-up timeout) ends a little later than
  // the sender's: let it pass too before the receiver recovers.
  std::this_thread::sleep_for(300ms);
  server.receiver().Release();
  ASSERT_TRUE(server.receiver().WaitForAborts(1));
  EXPECT_EQ(server.receiver().counts().end, 0);
  EXPECT_EQ(server.receiver().reservation("r1").state, FakeReceiver::State::kAborted);
  EXPECT_TRUE(ReleaseBlocks(*std::move(push)));
}

INSTANTIATE_TEST_SUITE_P(Layers, StalledReceiverTest, ::testing::Values(1, 4));

TEST(GrpcKvTransportTest, BadSendLayerFailsThePush) {
  TestKvServer server;
  const KvPushSpec spec = MakeSpec("r1", 4, 40);
  const KvData data(spec, 3);
  server.receiver().Reserve(spec, 3);
  auto transport = CreateGrpcKvTransport(Options());
  auto push = transport->StartPush(server.address(), spec, In(10000ms));
  ASSERT_TRUE(push.ok());
  ASSERT_TRUE((*push)->SendLayer(0, data.Layer(0)).ok());
  ASSERT_TRUE(server.receiver().WaitForWrites(1));
  EXPECT_EQ((*push)->SendLayer(2, data.Layer(2)).code(), absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(server.receiver().WaitForAborts(1));
  EXPECT_FALSE((*push)->Finish().ok());
  EXPECT_TRUE(ReleaseBlocks(*std::move(push)));
}

// Blocks still being filled when SendLayer is called (a copy from a GPU in flight): the
// transport reads them only once `ready` has passed, so the filled bytes arrive.
TEST(GrpcKvTransportTest, BlocksAreReadOnlyOnceReady) {
  TestKvServer server;
  const KvPushSpec spec = MakeSpec("r1", 4, 40);
  const KvData data(spec, 9);
  server.receiver().Reserve(spec, 3);
  std::vector<std::vector<uint8_t>> staged(
      spec.n_layer, std::vector<uint8_t>(spec.n_blocks() * spec.layer_block_bytes(), 0));
  absl::Notification filled;
  int ready_calls = 0;  // on the encoder's thread only
  auto ready = [&](std::chrono::system_clock::time_point deadline) {
    ++ready_calls;
    if (!filled.WaitForNotificationWithDeadline(absl::FromChrono(deadline))) {
      return absl::DeadlineExceededError("not filled");
    }
    return absl::OkStatus();
  };
  auto transport = CreateGrpcKvTransport(Options(2, 1024));
  auto push = transport->StartPush(server.address(), spec, In(10000ms));
  ASSERT_TRUE(push.ok()) << push.status();
  for (int32_t layer = 0; layer < spec.n_layer; ++layer) {
    std::vector<const uint8_t*> blocks;
    for (int32_t b = 0; b < spec.n_blocks(); ++b) {
      blocks.push_back(staged[layer].data() + b * spec.layer_block_bytes());
    }
    ASSERT_TRUE((*push)->SendLayer(layer, blocks, ready).ok());
  }
  std::this_thread::sleep_for(30ms);
  for (int32_t layer = 0; layer < spec.n_layer; ++layer) {
    for (int32_t b = 0; b < spec.n_blocks(); ++b) {
      std::memcpy(staged[layer].data() + b * spec.layer_block_bytes(), data.Layer(layer)[b],
                  spec.layer_block_bytes());
    }
  }
  filled.Notify();
  absl::StatusOr<KvPushStats> stats = (*push)->Finish();
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(ready_calls, stats->chunks_sent);  // once per chunk, before it is read
  EXPECT_TRUE(server.receiver().reservation("r1").bytes == data.Expected(3));
}

TEST(GrpcKvTransportTest, BlocksThatCannotBeHadFailThePushWithTheirReason) {
  TestKvServer server;
  const KvPushSpec spec = MakeSpec("r1", 4, 40);
  const KvData data(spec, 10);
  server.receiver().Reserve(spec, 3);
  auto transport = CreateGrpcKvTransport(Options(2));
  auto push = transport->StartPush(server.address(), spec, In(10000ms));
  ASSERT_TRUE(push.ok()) << push.status();
  auto broken = [](std::chrono::system_clock::time_point) {
    return absl::InternalError("cuda:0: copy to the host failed: test");
  };
  // Both streams under way at the receiver first, so that it has something to abort.
  ASSERT_TRUE((*push)->SendLayer(0, data.Layer(0)).ok());
  ASSERT_TRUE((*push)->SendLayer(1, data.Layer(1)).ok());
  ASSERT_TRUE(server.receiver().WaitForWrites(2));
  if ((*push)->SendLayer(2, data.Layer(2), broken).ok()) {
    (void)(*push)->SendLayer(3, data.Layer(3));  // the failure may be known by now
  }
  const absl::Status status = (*push)->Finish().status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInternal) << status;
  EXPECT_NE(status.message().find("layer 2's blocks: cuda:0: copy to the host failed"),
            std::string::npos)
      << status;
  ASSERT_TRUE(server.receiver().WaitForAborts(1));
  EXPECT_EQ(server.receiver().counts().end, 0);
  EXPECT_TRUE(ReleaseBlocks(*std::move(push)));
}

TEST(GrpcKvTransportTest, UnreachableDestinationIsUnavailable) {
  int port = 0;
  {
    TestKvServer gone;  // a port that nobody listens on any more
    port = std::stoi(gone.address().substr(gone.address().rfind(':') + 1));
  }
  const KvPushSpec spec = MakeSpec("r1");
  auto transport = CreateGrpcKvTransport(Options());
  absl::Status status =
      PushAll(*transport, absl::StrCat("127.0.0.1:", port), spec, KvData(spec, 1)).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable) << status;
}

TEST(GrpcKvTransportTest, RejectsImpossibleOptions) {
  const KvPushSpec spec = MakeSpec("r1");  // 512-byte blocks
  EXPECT_EQ(CreateGrpcKvTransport(Options(1, 100))
                ->StartPush("127.0.0.1:1", spec, In(1000ms))
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      CreateGrpcKvTransport(Options(0))->StartPush("127.0.0.1:1", spec, In(1000ms)).status().code(),
      absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace baton::kvtransfer
