// A decode worker's reservations receiving KV over the real gRPC transport on 127.0.0.1, from a
// sender whose cache holds another element type (a GPU prefill worker's bf16 or f32 cache): the
// blocks land as the f16 of the values sent; a push the sender abandons frees every block.
#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "decode_worker/reservation_table.h"
#include "gtest/gtest.h"
#include "kernels/backend.h"
#include "kernels/backend_factory.h"
#include "kernels/device.h"
#include "kernels/half.h"
#include "kvtransfer/kv_transfer_service.h"
#include "kvtransfer/kv_transport.h"
#include "rpc/server_options.h"
#include "tests/support/own_memory_backend.h"

namespace baton::decode_worker {
namespace {

using kvtransfer::KvDtype;

engine::ModelConfig Config() {
  engine::ModelConfig c;
  c.n_layer = 3;
  c.n_head = 4;
  c.n_head_kv = 2;
  c.head_dim = 16;
  c.n_embd = 64;
  return c;
}

// Where the receiver's cache is: host memory; a memory of its own (a device's, simulated on the
// CPU: the blocks must arrive through the backend's copies); the first GPU's (skipped without
// one: a CPU sender pushing into a GPU decode worker).
enum class CacheMemory { kHost, kOwn, kGpu };

const char* SuffixOf(CacheMemory memory) {
  switch (memory) {
    case CacheMemory::kHost:
      return "";
    case CacheMemory::kOwn:
      return "_IntoMemoryOfItsOwn";
    case CacheMemory::kGpu:
      return "_IntoAGpu";
  }
  return "";
}

// The dtype the push sends, and where it lands.
struct PushCase {
  KvDtype dtype;
  CacheMemory memory;
};

class GrpcPushIntoReservationsTest : public testing::TestWithParam<PushCase> {
 protected:
  void SetUp() override {
    backend_ = kernels::CreateCpuBackend({.reference = true});
    if (GetParam().memory == CacheMemory::kOwn) {
      backend_ = std::make_unique<test_support::OwnMemoryBackend>(std::move(backend_));
    }
    if (GetParam().memory == CacheMemory::kGpu) {
      absl::StatusOr<std::unique_ptr<kernels::Backend>> gpu =
          kernels::CreateBackend(*kernels::ParseDevice("cuda"), {});
      if (!gpu.ok()) GTEST_SKIP() << "needs a CUDA GPU: " << gpu.status().message();
      backend_ = *std::move(gpu);
    }
    absl::StatusOr<std::unique_ptr<engine::KvCache>> cache =
        engine::KvCache::Create(Config(), {.block_size = 16, .n_blocks = 32}, *backend_);
    ASSERT_TRUE(cache.ok()) << cache.status();
    cache_ = *std::move(cache);
    table_ = std::make_unique<ReservationTable>(
        cache_.get(), ReservationTableOptions{.model_fingerprint = "fp", .max_context = 512});
    service_ = kvtransfer::CreateKvTransferService(table_.get());
    rpc::ServerOptions options;
    options.host = "127.0.0.1";
    options.port = 0;
    absl::StatusOr<rpc::StartedServer> server = rpc::StartServer(options, {service_.get()});
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    // Small chunks and two streams, so that a push takes several messages on each stream.
    transport_ = kvtransfer::CreateGrpcKvTransport({.chunk_bytes = 8192, .n_streams = 2});
  }
  void TearDown() override {
    transport_.reset();
    if (server_.server) server_.server->Shutdown();
  }

  std::string address() const { return absl::StrCat("127.0.0.1:", server_.port); }

  std::unique_ptr<kernels::Backend> backend_;
  std::unique_ptr<engine::KvCache> cache_;
  std::unique_ptr<ReservationTable> table_;
  std::unique_ptr<grpc::Service> service_;
  rpc::StartedServer server_;
  std::unique_ptr<kvtransfer::KvTransport> transport_;
};

TEST_P(GrpcPushIntoReservationsTest, BlocksLandAsTheF16OfTheValuesSent) {
  const KvDtype dtype = GetParam().dtype;
  const int32_t n_tokens = 100;  // 7 blocks
  auto reserved = table_->Reserve("req", "fp", n_tokens, 1, std::chrono::seconds(30));
  ASSERT_TRUE(reserved.ok()) << reserved.status();
  const kvtransfer::KvPushSpec spec{.reservation_id = reserved->reservation_id,
                                    .model_fingerprint = "fp",
                                    .n_layer = 3,
                                    .kv_dim = 32,
                                    .block_size = 16,
                                    .n_tokens = n_tokens,
                                    .dtype = dtype};
  // The sender's cache: every element a distinct value, held in `dtype`; `expected` the f16 the
  // receiver must hold (one rounding, from the exact value the sender held).
  const int64_t elements = spec.layer_block_elements();
  const int32_t n_blocks = spec.n_blocks();
  std::vector<std::vector<uint8_t>> sender(static_cast<size_t>(3) * n_blocks,
                                           std::vector<uint8_t>(spec.layer_block_bytes()));
  std::vector<std::vector<uint16_t>> expected(sender.size(), std::vector<uint16_t>(elements));
  for (size_t b = 0; b < sender.size(); ++b) {
    for (int64_t i = 0; i < elements; ++i) {
      const float value = 0.01f * static_cast<float>((b * 977 + i * 31) % 20011) - 100.0f;
      float held = value;
      if (dtype == KvDtype::kF32) {
        std::memcpy(sender[b].data() + 4 * i, &value, 4);
      } else {
        const uint16_t h = dtype == KvDtype::kF16 ? kernels::F32ToF16(value)
                                                  : kernels::F32ToBF16(value);
        std::memcpy(sender[b].data() + 2 * i, &h, 2);
        held = dtype == KvDtype::kF16 ? kernels::F16ToF32(h) : kernels::BF16ToF32(h);
      }
      expected[b][i] = kernels::F32ToF16(held);
    }
  }
  absl::StatusOr<std::unique_ptr<kvtransfer::KvPush>> push = transport_->StartPush(
      address(), spec, std::chrono::system_clock::now() + std::chrono::seconds(30));
  ASSERT_TRUE(push.ok()) << push.status();
  for (int32_t layer = 0; layer < 3; ++layer) {
    std::vector<const uint8_t*> blocks;
    for (int32_t b = 0; b < n_blocks; ++b) blocks.push_back(sender[layer * n_blocks + b].data());
    ASSERT_TRUE((*push)->SendLayer(layer, blocks).ok());
  }
  absl::StatusOr<kvtransfer::KvPushStats> stats = (*push)->Finish();
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(stats->bytes_sent, spec.total_bytes());

  absl::StatusOr<ClaimedSequence> claimed = table_->Claim(reserved->reservation_id, n_tokens);
  ASSERT_TRUE(claimed.ok()) << claimed.status();
  std::vector<uint16_t> block(elements);
  for (int32_t layer = 0; layer < 3; ++layer) {
    for (int32_t b = 0; b < n_blocks; ++b) {
      backend_->CopyToHost(block.data(), cache_->LayerBlock(layer, claimed->table, b),
                           elements * sizeof(uint16_t));
      ASSERT_TRUE(block == expected[layer * n_blocks + b])
          << "layer " << layer << " block " << b << " (" << kvtransfer::KvDtypeName(dtype) << ")";
    }
  }
  if (GetParam().memory == CacheMemory::kOwn) {
    const auto& own = static_cast<const test_support::OwnMemoryBackend&>(*backend_);
    EXPECT_EQ(own.bytes_to_device(), 3 * n_blocks * elements * sizeof(uint16_t));
    // Every chunk went through one recycled host buffer, not a fresh one each.
    EXPECT_GT(stats->chunks_sent, 3);
    EXPECT_EQ(own.host_allocations(), 1);
  }
  cache_->Free(claimed->table);
  EXPECT_EQ(cache_->pool().n_free(), cache_->pool().n_blocks());
}

// Abandoned once its first layer is on its way: the receiver aborts the push (or, when the
// header had not arrived yet, the reservation's short lease runs out); either way every block
// comes back, as the decode worker's loop (ExpireLeases each step) would see.
TEST_P(GrpcPushIntoReservationsTest, AnAbandonedPushFreesEveryBlock) {
  auto reserved = table_->Reserve("req", "fp", 100, 1, std::chrono::milliseconds(300));
  ASSERT_TRUE(reserved.ok()) << reserved.status();
  const kvtransfer::KvPushSpec spec{.reservation_id = reserved->reservation_id,
                                    .model_fingerprint = "fp",
                                    .n_layer = 3,
                                    .kv_dim = 32,
                                    .block_size = 16,
                                    .n_tokens = 100,
                                    .dtype = GetParam().dtype};
  std::vector<std::vector<uint8_t>> sender(spec.n_blocks(),
                                           std::vector<uint8_t>(spec.layer_block_bytes(), 1));
  std::vector<const uint8_t*> blocks;
  for (const auto& b : sender) blocks.push_back(b.data());
  absl::StatusOr<std::unique_ptr<kvtransfer::KvPush>> push = transport_->StartPush(
      address(), spec, std::chrono::system_clock::now() + std::chrono::seconds(30));
  ASSERT_TRUE(push.ok()) << push.status();
  ASSERT_TRUE((*push)->SendLayer(0, blocks).ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  (*push)->Cancel();
  // The sender's blocks stay until the network lets go of them (kv_transport.h).
  auto released = std::make_shared<absl::Notification>();
  (*push)->WhenBlocksReleased([released] { released->Notify(); });
  push->reset();
  EXPECT_TRUE(released->WaitForNotificationWithTimeout(absl::Minutes(1)));
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (table_->size() > 0 && std::chrono::steady_clock::now() < give_up) {
    table_->ExpireLeases();
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_EQ(table_->size(), 0);
  EXPECT_EQ(cache_->pool().n_free(), cache_->pool().n_blocks());
}

INSTANTIATE_TEST_SUITE_P(
    EveryDtype, GrpcPushIntoReservationsTest,
    testing::Values(PushCase{KvDtype::kF16, CacheMemory::kHost},
                    PushCase{KvDtype::kBF16, CacheMemory::kHost},
                    PushCase{KvDtype::kF32, CacheMemory::kHost},
                    PushCase{KvDtype::kF16, CacheMemory::kOwn},
                    PushCase{KvDtype::kBF16, CacheMemory::kOwn},
                    PushCase{KvDtype::kF16, CacheMemory::kGpu},
                    PushCase{KvDtype::kF32, CacheMemory::kGpu}),
    [](const testing::TestParamInfo<PushCase>& info) {
      return std::string(kvtransfer::KvDtypeName(info.param.dtype)) +
             SuffixOf(info.param.memory);
    });

}  // namespace
}  // namespace baton::decode_worker
