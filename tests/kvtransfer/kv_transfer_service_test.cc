// The KvTransfer service driven by hand-made messages over a raw stub: what a misbehaving or
// broken sender gets.
#include <chrono>
#include <memory>
#include <string>

#include "baton/v1/kv_transfer.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "kvtransfer/kv_wire.h"
#include "rpc/server_options.h"
#include "tests/kvtransfer/fake_receiver.h"
#include "tests/kvtransfer/kv_test_util.h"

namespace baton::kvtransfer {
namespace {

using ::baton::kvtransfer::testing::FakeReceiver;
using ::baton::kvtransfer::testing::In;
using ::baton::kvtransfer::testing::KvData;
using ::baton::kvtransfer::testing::MakeSpec;
using ::baton::kvtransfer::testing::TestKvServer;
using std::chrono_literals::operator""ms;

v1::KvPushMessage Header(const KvPushSpec& spec, int32_t stream_index = 0, int32_t n_streams = 1) {
  v1::KvPushMessage message;
  *message.mutable_header() = HeaderFromSpec(spec, stream_index, n_streams);
  return message;
}

std::span<const uint8_t> DataOf(const v1::KvChunk& chunk) {
  return {reinterpret_cast<const uint8_t*>(chunk.data().data()), chunk.data().size()};
}

v1::KvPushMessage Chunk(const KvPushSpec& spec, const KvData& data, int32_t layer) {
  v1::KvPushMessage message;
  v1::KvChunk& chunk = *message.mutable_chunk();
  chunk.set_layer(layer);
  chunk.set_first_block(0);
  chunk.set_n_blocks(spec.n_blocks());
  for (const uint8_t* block : data.Layer(layer)) {
    chunk.mutable_data()->append(reinterpret_cast<const char*>(block), spec.layer_block_bytes());
  }
  chunk.set_xxh3(ChunkChecksum(DataOf(chunk)));
  return message;
}

// The same chunk as a sender from before XXH3 wrote it.
v1::KvPushMessage LegacyChunk(const KvPushSpec& spec, const KvData& data, int32_t layer) {
  v1::KvPushMessage message = Chunk(spec, data, layer);
  message.mutable_chunk()->set_xxh64(Xxh64Checksum(KvBytePieces{DataOf(message.chunk())}));
  return message;
}

class KvTransferServiceTest : public ::testing::Test {
 protected:
  explicit KvTransferServiceTest(int max_message_bytes = 64 << 20)
      : server_("", max_message_bytes), spec_(MakeSpec("r1", 3, 40)), data_(spec_, 9) {
    server_.receiver().Reserve(spec_, 3);
  }

  void SetUp() override {
    absl::StatusOr<std::shared_ptr<grpc::Channel>> channel =
        rpc::MakeChannel(server_.address(), {});
    ASSERT_TRUE(channel.ok()) << channel.status();
    stub_ = v1::KvTransfer::NewStub(*channel);
  }

  struct Call {
    grpc::ClientContext context;
    v1::KvPushResponse response;
    std::unique_ptr<grpc::ClientWriter<v1::KvPushMessage>> writer;
  };
  std::unique_ptr<Call> Open() {
    auto call = std::make_unique<Call>();
    rpc::PrepareContext(call->context, {}, In(10000ms));
    call->writer = stub_->PushKv(&call->context, &call->response);
    return call;
  }
  // Writes (ignoring failures: the server may already have answered) and half-closes.
  grpc::Status Send(Call& call, const std::vector<v1::KvPushMessage>& messages) {
    for (const v1::KvPushMessage& message : messages) {
      if (!call.writer->Write(message)) break;
    }
    call.writer->WritesDone();
    return call.writer->Finish();
  }

  TestKvServer server_;
  KvPushSpec spec_;
  KvData data_;
  std::unique_ptr<v1::KvTransfer::Stub> stub_;
};

TEST_F(KvTransferServiceTest, WellFormedPushSucceeds) {
  auto call = Open();
  grpc::Status status = Send(*call, {Header(spec_), Chunk(spec_, data_, 0), Chunk(spec_, data_, 1),
                                     Chunk(spec_, data_, 2)});
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_TRUE(call->response.push_complete());
  EXPECT_EQ(call->response.layers_complete(), 3);
  EXPECT_EQ(call->response.bytes_received(), spec_.total_bytes());
  EXPECT_TRUE(server_.receiver().reservation("r1").bytes == data_.Expected(3));
}

TEST_F(KvTransferServiceTest, AnOlderSendersXxh64ChunksAreAccepted) {
  auto call = Open();
  grpc::Status status = Send(*call, {Header(spec_), LegacyChunk(spec_, data_, 0),
                                     LegacyChunk(spec_, data_, 1), LegacyChunk(spec_, data_, 2)});
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_TRUE(call->response.push_complete());
  EXPECT_TRUE(server_.receiver().reservation("r1").bytes == data_.Expected(3));
}

TEST_F(KvTransferServiceTest, CorruptedChunkIsDataLossAndAborts) {
  v1::KvPushMessage corrupted = Chunk(spec_, data_, 1);
  (*corrupted.mutable_chunk()->mutable_data())[700] ^= 0x40;  // after the checksum was taken
  auto call = Open();
  grpc::Status status = Send(*call, {Header(spec_), Chunk(spec_, data_, 0), corrupted});
  EXPECT_EQ(status.error_code(), grpc::StatusCode::DATA_LOSS);
  EXPECT_EQ(status.error_message(), "chunk for layer 1 blocks [0,3): checksum mismatch");
  ASSERT_TRUE(server_.receiver().WaitForAborts(1));
  EXPECT_EQ(server_.receiver().reservation("r1").abort_reason.code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(server_.receiver().counts().write, 1);  // the bad chunk never reached the receiver
  EXPECT_EQ(server_.receiver().counts().end, 0);
}

TEST_F(KvTransferServiceTest, WrongChunkSizeIsInvalidArgument) {
  v1::KvPushMessage short_chunk = Chunk(spec_, data_, 0);
  v1::KvChunk& chunk = *short_chunk.mutable_chunk();
  chunk.mutable_data()->resize(chunk.data().size() - 512);
  chunk.set_xxh3(ChunkChecksum(DataOf(chunk)));
  auto call = Open();
  EXPECT_EQ(Send(*call, {Header(spec_), short_chunk}).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_TRUE(server_.receiver().WaitForAborts(1));
}

TEST_F(KvTransferServiceTest, FirstMessageMustBeAHeader) {
  auto call = Open();
  grpc::Status status = Send(*call, {Chunk(spec_, data_, 0)});
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(status.error_message(), "first message must be a header");
  auto empty = Open();
  EXPECT_EQ(Send(*empty, {}).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(server_.receiver().counts().begin, 0);
}

TEST_F(KvTransferServiceTest, SecondHeaderIsInvalidArgument) {
  auto call = Open();
  EXPECT_EQ(Send(*call, {Header(spec_), Header(spec_)}).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_TRUE(server_.receiver().WaitForAborts(1));
}

TEST_F(KvTransferServiceTest, StreamEndingBeforeTheLastLayerFailsAndAborts) {
  auto call = Open();
  EXPECT_EQ(Send(*call, {Header(spec_), Chunk(spec_, data_, 0)}).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_TRUE(server_.receiver().WaitForAborts(1));
  EXPECT_EQ(server_.receiver().counts().end, 0);
}

TEST_F(KvTransferServiceTest, SecondPushToAReceivingReservationIsRefused) {
  auto first = Open();
  ASSERT_TRUE(first->writer->Write(Header(spec_)));
  ASSERT_TRUE(first->writer->Write(Chunk(spec_, data_, 0)));
  ASSERT_TRUE(server_.receiver().WaitForWrites(1));
  auto second = Open();
  EXPECT_EQ(Send(*second, {Header(spec_)}).error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  // The first push is untouched and completes.
  grpc::Status status = Send(*first, {Chunk(spec_, data_, 1), Chunk(spec_, data_, 2)});
  EXPECT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(server_.receiver().counts().abort, 0);
}

TEST_F(KvTransferServiceTest, ClientCancelAborts) {
  auto call = Open();
  ASSERT_TRUE(call->writer->Write(Header(spec_)));
  ASSERT_TRUE(call->writer->Write(Chunk(spec_, data_, 0)));
  ASSERT_TRUE(server_.receiver().WaitForWrites(1));
  call->context.TryCancel();
  EXPECT_EQ(call->writer->Finish().error_code(), grpc::StatusCode::CANCELLED);
  ASSERT_TRUE(server_.receiver().WaitForAborts(1));
  EXPECT_EQ(server_.receiver().reservation("r1").abort_reason.code(), absl::StatusCode::kCancelled);
}

TEST_F(KvTransferServiceTest, TwoStreamsWithTheLaterLayerFirst) {
  // Stream 1 (layer 1) starts first and has to wait for stream 0's layer 0.
  auto second = Open();
  ASSERT_TRUE(second->writer->Write(Header(spec_, 1, 2)));
  ASSERT_TRUE(second->writer->Write(Chunk(spec_, data_, 1)));
  auto first = Open();
  grpc::Status status =
      Send(*first, {Header(spec_, 0, 2), Chunk(spec_, data_, 0), Chunk(spec_, data_, 2)});
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_TRUE(first->response.push_complete());
  status = Send(*second, {});
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_TRUE(second->response.push_complete());
  EXPECT_EQ(second->response.bytes_received(), spec_.total_bytes() / 3);
  EXPECT_TRUE(server_.receiver().reservation("r1").bytes == data_.Expected(3));
  EXPECT_EQ(server_.receiver().counts().end, 1);
}

TEST_F(KvTransferServiceTest, CorruptChunkOnOneStreamFailsTheOther) {
  auto second = Open();
  ASSERT_TRUE(second->writer->Write(Header(spec_, 1, 2)));
  ASSERT_TRUE(server_.receiver().WaitForBegins(1));
  second->writer->Write(Chunk(spec_, data_, 1));  // parked, or refused once the push failed
  v1::KvPushMessage corrupted = Chunk(spec_, data_, 0);
  (*corrupted.mutable_chunk()->mutable_data())[3] ^= 1;
  auto first = Open();
  EXPECT_EQ(Send(*first, {Header(spec_, 0, 2), corrupted}).error_code(),
            grpc::StatusCode::DATA_LOSS);
  EXPECT_EQ(Send(*second, {}).error_code(), grpc::StatusCode::DATA_LOSS);
  EXPECT_EQ(server_.receiver().counts().abort, 1);
  EXPECT_EQ(server_.receiver().counts().write, 0);
}

class SmallMessageServiceTest : public KvTransferServiceTest {
 protected:
  SmallMessageServiceTest() : KvTransferServiceTest(/*max_message_bytes=*/1024) {}
};

TEST_F(SmallMessageServiceTest, OversizedMessageIsResourceExhausted) {
  auto call = Open();
  // Each layer chunk is 3 blocks of 512 bytes: more than the server's 1 KiB limit.
  EXPECT_EQ(Send(*call, {Header(spec_), Chunk(spec_, data_, 0)}).error_code(),
            grpc::StatusCode::RESOURCE_EXHAUSTED);
  ASSERT_TRUE(server_.receiver().WaitForAborts(1));
  EXPECT_EQ(server_.receiver().counts().write, 0);
  // The server lives on and serves the next push.
  server_.receiver().Reserve(MakeSpec("r2", 3, 10), 1);  // one 512-byte block per layer
  const KvPushSpec small = MakeSpec("r2", 3, 10);
  const KvData small_data(small, 4);
  auto next = Open();
  grpc::Status status = Send(*next, {Header(small), Chunk(small, small_data, 0),
                                     Chunk(small, small_data, 1), Chunk(small, small_data, 2)});
  EXPECT_TRUE(status.ok()) << status.error_message();
}

}  // namespace
}  // namespace baton::kvtransfer
