// NCCL links (kvtransfer/nccl/) on a GPU machine: two ends connect, blocks travel device to
// device and land byte for byte, a transfer the peer never takes is ended within its bound, and
// a whole push lands in a GPU decode worker's reservation. Skipped, saying why, without a GPU or
// without NCCL; on one GPU, NCCL before 2.30 refuses two ranks, which the receiving end says
// (and the rest is skipped: run with BATON_NCCL_LIBRARY pointing at a 2.30+ libnccl.so.2).
#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "decode_worker/reservation_table.h"
#include "engine/kv_cache.h"
#include "engine/model_config.h"
#include "gtest/gtest.h"
#include "kernels/backend_factory.h"
#include "kvtransfer/kv_transfer_service.h"
#include "kvtransfer/kv_transport.h"
#include "kvtransfer/link_acceptor.h"
#include "kvtransfer/nccl/nccl_link_factory.h"
#include "rpc/server_options.h"

namespace baton::kvtransfer {
namespace {

constexpr size_t kBlockBytes = 64 << 10;

class NcclLinkTest : public testing::Test {
 protected:
  void SetUp() override {
    const kernels::Device device = *kernels::ParseDevice("cuda:0");
    absl::StatusOr<std::unique_ptr<LinkFactory>> links = CreateNcclLinkFactory(device);
    if (!links.ok()) GTEST_SKIP() << "needs a GPU and NCCL: " << links.status().message();
    links_ = *std::move(links);
    absl::StatusOr<std::unique_ptr<kernels::Backend>> gpu = kernels::CreateBackend(device, {});
    ASSERT_TRUE(gpu.ok()) << gpu.status();
    gpu_ = *std::move(gpu);
  }

  // Both ends of a new link, connected; skips where NCCL cannot link two ranks on one GPU.
  void Connect() {
    std::string bootstrap;
    absl::StatusOr<std::unique_ptr<LinkEndpoint>> sender = links_->Offer(&bootstrap);
    ASSERT_TRUE(sender.ok()) << sender.status();
    absl::StatusOr<std::unique_ptr<LinkEndpoint>> receiver = links_->Accept(bootstrap);
    if (!receiver.ok()) {
      ASSERT_EQ(receiver.status().code(), absl::StatusCode::kFailedPrecondition)
          << receiver.status();
      EXPECT_NE(receiver.status().message().find("NCCL 2.30+"), std::string::npos);
      GTEST_SKIP() << receiver.status().message();
    }
    absl::Status receiver_connected;
    std::thread accept([&] {
      receiver_connected = (*receiver)->AwaitConnected(absl::Now() + absl::Seconds(60));
    });
    const absl::Status sender_connected =
        (*sender)->AwaitConnected(absl::Now() + absl::Seconds(60));
    accept.join();
    ASSERT_TRUE(sender_connected.ok()) << sender_connected;
    ASSERT_TRUE(receiver_connected.ok()) << receiver_connected;
    sender_ = *std::move(sender);
    receiver_ = *std::move(receiver);
  }

  // `n` blocks of device memory (one allocation: neighbours, as a cache's blocks often are).
  std::vector<uint8_t*> DeviceBlocks(int n) {
    absl::StatusOr<void*> memory = gpu_->Allocate(n * kBlockBytes);
    EXPECT_TRUE(memory.ok());
    allocations_.push_back(*memory);
    std::vector<uint8_t*> blocks;
    for (int i = 0; i < n; ++i) blocks.push_back(static_cast<uint8_t*>(*memory) + i * kBlockBytes);
    return blocks;
  }

  void TearDown() override {
    sender_.reset();
    receiver_.reset();
    for (void* p : allocations_) gpu_->Free(p);
  }

  std::unique_ptr<LinkFactory> links_;
  std::unique_ptr<kernels::Backend> gpu_;
  std::unique_ptr<LinkEndpoint> sender_;
  std::unique_ptr<LinkEndpoint> receiver_;
  std::vector<void*> allocations_;
};

TEST_F(NcclLinkTest, RefusesABootstrapShorterThanAUniqueId) {
  absl::StatusOr<std::unique_ptr<LinkEndpoint>> refused = links_->Accept("short");
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument) << refused.status();
}

TEST_F(NcclLinkTest, BlocksTravelDeviceToDeviceByteForByte) {
  Connect();
  if (IsSkipped() || HasFatalFailure()) return;
  std::vector<uint8_t*> from = DeviceBlocks(3);
  std::vector<uint8_t*> to = DeviceBlocks(4);
  // Out of order at the receiving end: runs of neighbours and single blocks.
  const std::vector<uint8_t*> into = {to[2], to[3], to[0]};
  std::vector<std::vector<uint8_t>> sent(3, std::vector<uint8_t>(kBlockBytes));
  for (int b = 0; b < 3; ++b) {
    for (size_t i = 0; i < kBlockBytes; ++i) sent[b][i] = static_cast<uint8_t>(i * 7 + b * 13);
    gpu_->CopyToDevice(from[b], sent[b].data(), kBlockBytes);
  }
  const std::vector<const uint8_t*> source(from.begin(), from.end());
  ASSERT_TRUE(sender_->PostSend(source, kBlockBytes).ok());
  ASSERT_TRUE(receiver_->PostReceive(into, kBlockBytes).ok());
  ASSERT_TRUE(AwaitIdle(*receiver_, absl::Now() + absl::Seconds(30)).ok());
  ASSERT_TRUE(AwaitIdle(*sender_, absl::Now() + absl::Seconds(30)).ok());
  std::vector<uint8_t> landed(kBlockBytes);
  for (int b = 0; b < 3; ++b) {
    gpu_->CopyToHost(landed.data(), into[b], kBlockBytes);
    EXPECT_EQ(landed, sent[b]) << "block " << b;
  }
}

TEST_F(NcclLinkTest, ASendThePeerNeverTakesEndsWithinItsBoundAndAborts) {
  Connect();
  if (IsSkipped() || HasFatalFailure()) return;
  std::vector<uint8_t*> from = DeviceBlocks(1);
  const std::vector<const uint8_t*> source(from.begin(), from.end());
  ASSERT_TRUE(sender_->PostSend(source, kBlockBytes).ok());
  const absl::Time start = absl::Now();
  EXPECT_EQ(AwaitIdle(*sender_, start + absl::Milliseconds(300)).code(),
            absl::StatusCode::kDeadlineExceeded);
  sender_->Abort();  // must not hang on the kernel waiting for its peer
  EXPECT_LT(absl::Now() - start, absl::Seconds(30));
  EXPECT_FALSE(sender_->Idle().ok());
  EXPECT_FALSE(sender_->PostSend(source, kBlockBytes).ok());
}

// A whole push, GPU cache to a GPU decode worker's reservation over an NCCL link.
TEST_F(NcclLinkTest, APushLandsInAGpuReservation) {
  engine::ModelConfig config;
  config.n_layer = 3;
  config.n_head = 4;
  config.n_head_kv = 2;
  config.head_dim = 16;
  config.n_embd = 64;
  absl::StatusOr<std::unique_ptr<engine::KvCache>> cache =
      engine::KvCache::Create(config, {.block_size = 16, .n_blocks = 32}, *gpu_);
  ASSERT_TRUE(cache.ok()) << cache.status();
  decode_worker::ReservationTable table(
      cache->get(), {.model_fingerprint = "fp", .max_context = 512});
  LinkAcceptor acceptor(links_.get());
  std::unique_ptr<grpc::Service> service = CreateKvTransferService(&table, &acceptor);
  absl::StatusOr<rpc::StartedServer> server =
      rpc::StartServer({.host = "127.0.0.1", .port = 0}, {service.get()});
  ASSERT_TRUE(server.ok()) << server.status();
  const std::string address = absl::StrCat("127.0.0.1:", server->port);

  const int32_t n_tokens = 70;  // 5 blocks
  auto reserved = table.Reserve("req", "fp", n_tokens, 1, std::chrono::seconds(30));
  ASSERT_TRUE(reserved.ok()) << reserved.status();
  const KvPushSpec spec{.reservation_id = reserved->reservation_id, .model_fingerprint = "fp",
                        .n_layer = 3, .kv_dim = config.kv_dim(), .block_size = 16,
                        .n_tokens = n_tokens};
  // The sender's blocks on the GPU, each a distinct pattern.
  const size_t block_bytes = spec.layer_block_bytes();
  std::vector<std::vector<uint8_t>> sent;
  std::vector<std::vector<const uint8_t*>> layers(3);
  for (int32_t layer = 0; layer < 3; ++layer) {
    for (int32_t b = 0; b < spec.n_blocks(); ++b) {
      std::vector<uint8_t> bytes(block_bytes);
      for (size_t i = 0; i < block_bytes; ++i) bytes[i] = static_cast<uint8_t>(i + layer * 31 + b);
      absl::StatusOr<void*> block = gpu_->Allocate(block_bytes);
      ASSERT_TRUE(block.ok());
      allocations_.push_back(*block);
      gpu_->CopyToDevice(*block, bytes.data(), block_bytes);
      layers[layer].push_back(static_cast<const uint8_t*>(*block));
      sent.push_back(std::move(bytes));
    }
  }
  std::unique_ptr<KvTransport> transport = CreateLinkKvTransport(links_.get(), {});
  auto push = transport->StartPush(address, spec,
                                   std::chrono::system_clock::now() + std::chrono::seconds(60));
  if (!push.ok() && push.status().code() == absl::StatusCode::kFailedPrecondition) {
    server->server->Shutdown();
    GTEST_SKIP() << push.status().message();
  }
  ASSERT_TRUE(push.ok()) << push.status();
  EXPECT_EQ((*push)->transport_name(), "nccl");
  for (int32_t layer = 0; layer < 3; ++layer) {
    ASSERT_TRUE((*push)->SendLayer(layer, layers[layer]).ok());
  }
  absl::StatusOr<KvPushStats> stats = (*push)->Finish();
  ASSERT_TRUE(stats.ok()) << stats.status();
  absl::StatusOr<decode_worker::ClaimedSequence> claimed =
      table.Claim(reserved->reservation_id, n_tokens);
  ASSERT_TRUE(claimed.ok()) << claimed.status();
  std::vector<uint8_t> landed(block_bytes);
  for (int32_t layer = 0; layer < 3; ++layer) {
    for (int32_t b = 0; b < spec.n_blocks(); ++b) {
      gpu_->CopyToHost(landed.data(), (*cache)->LayerBlock(layer, claimed->table, b),
                       block_bytes);
      EXPECT_EQ(landed, sent[layer * spec.n_blocks() + b]) << "layer " << layer << " block " << b;
    }
  }
  (*cache)->Free(claimed->table);
  push->reset();
  transport.reset();
  server->server->Shutdown();
}

}  // namespace
}  // namespace baton::kvtransfer
