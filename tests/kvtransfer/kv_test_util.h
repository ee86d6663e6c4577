// Test helpers for kvtransfer: a deterministic KV to push, the check that it arrived intact, and a
// real KvTransfer gRPC server on 127.0.0.1 over a FakeReceiver.
#ifndef BATON_TESTS_KVTRANSFER_KV_TEST_UTIL_H_
#define BATON_TESTS_KVTRANSFER_KV_TEST_UTIL_H_

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "kvtransfer/kv_push_spec.h"
#include "kvtransfer/kv_transfer_service.h"
#include "kvtransfer/kv_transport.h"
#include "rpc/server_options.h"
#include "tests/kvtransfer/fake_receiver.h"

namespace baton::kvtransfer::testing {

inline KvPushSpec MakeSpec(const std::string& reservation_id, int32_t n_layer = 4,
                           int32_t n_tokens = 40) {
  return KvPushSpec{.reservation_id = reservation_id,
                    .model_fingerprint = "model-abc",
                    .n_layer = n_layer,
                    .kv_dim = 8,
                    .block_size = 16,
                    .n_tokens = n_tokens};
}

// A sequence's KV as a prefill worker holds it: separate blocks per layer, filled with a pattern
// unique to (seed, layer, block, byte).
class KvData {
 public:
  KvData(const KvPushSpec& spec, uint32_t seed) : spec_(spec) {
    blocks_.resize(spec.n_layer);
    for (int32_t layer = 0; layer < spec.n_layer; ++layer) {
      for (int32_t block = 0; block < spec.n_blocks(); ++block) {
        std::vector<uint8_t> bytes(spec.layer_block_bytes());
        uint32_t x = seed * 2654435761u + layer * 40503u + block * 9973u + 1;
        for (uint8_t& b : bytes) {
          x ^= x << 13;
          x ^= x >> 17;
          x ^= x << 5;
          b = static_cast<uint8_t>(x);
        }
        blocks_[layer].push_back(std::move(bytes));
      }
    }
  }

  std::vector<const uint8_t*> Layer(int32_t layer) const {
    return Range(layer, 0, spec_.n_blocks());
  }
  // Blocks [begin, end) of `layer`.
  std::vector<const uint8_t*> Range(int32_t layer, int32_t begin, int32_t end) const {
    std::vector<const uint8_t*> pointers;
    for (int32_t b = begin; b < end; ++b) pointers.push_back(blocks_[layer][b].data());
    return pointers;
  }

  // The bytes a FakeReservation with `n_reserved` blocks per layer should hold (zero for the
  // blocks before the spec's first_block, which are not sent).
  std::vector<uint8_t> Expected(int32_t n_reserved) const {
    const int64_t block_bytes = spec_.layer_block_bytes();
    std::vector<uint8_t> out(static_cast<size_t>(spec_.n_layer) * n_reserved * block_bytes, 0);
    for (int32_t layer = 0; layer < spec_.n_layer; ++layer) {
      for (int32_t block = spec_.LayerFirstBlock(layer); block < spec_.n_blocks(); ++block) {
        std::copy(blocks_[layer][block].begin(), blocks_[layer][block].end(),
                  out.begin() + (int64_t{layer} * n_reserved + block) * block_bytes);
      }
    }
    return out;
  }

 private:
  KvPushSpec spec_;
  std::vector<std::vector<std::vector<uint8_t>>> blocks_;  // [layer][block][bytes]
};

// A started KvTransfer server over a FakeReceiver. Stops (releasing a stalled receiver first) on
// destruction.
class TestKvServer {
 public:
  // `links`: where OpenKvLink opens links (must outlive the server); null: none.
  explicit TestKvServer(const std::string& token = "", int max_message_bytes = 64 << 20,
                        LinkAcceptor* links = nullptr) {
    service_ = CreateKvTransferService(&receiver_, links);
    absl::StatusOr<rpc::StartedServer> started = rpc::StartServer(
        {.auth_token = token, .tls = {}, .max_message_bytes = max_message_bytes}, {service_.get()});
    EXPECT_TRUE(started.ok()) << started.status();
    if (started.ok()) started_ = *std::move(started);
  }
  ~TestKvServer() {
    receiver_.Release();
    if (started_.server != nullptr) {
      started_.server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
    }
  }

  std::string address() const { return absl::StrCat("127.0.0.1:", started_.port); }
  FakeReceiver& receiver() { return receiver_; }

 private:
  FakeReceiver receiver_;
  std::unique_ptr<grpc::Service> service_;
  rpc::StartedServer started_;
};

// Sends all of `data` in the push's order (range by range, layer by layer); the first error.
inline absl::Status SendAll(KvPush& push, const KvPushSpec& spec, const KvData& data) {
  for (int32_t begin = spec.first_block; begin < spec.n_blocks(); begin = spec.RangeEnd(begin)) {
    const int32_t end = spec.RangeEnd(begin);
    for (int32_t layer = 0; layer < spec.n_layer; ++layer) {
      if (absl::Status sent = push.SendLayer(layer, data.Range(layer, begin, end)); !sent.ok()) {
        return sent;
      }
    }
  }
  return absl::OkStatus();
}

// Destroys a push (after its Finish or Cancel) and waits until the transport reads none of its
// blocks any more: until then they must stay as they are (kv_transport.h; a failed call may keep
// its messages until the push is destroyed). False after a minute.
inline bool ReleaseBlocks(std::unique_ptr<KvPush> push) {
  auto released = std::make_shared<absl::Notification>();
  push->WhenBlocksReleased([released] { released->Notify(); });
  push.reset();
  return released->WaitForNotificationWithTimeout(absl::Minutes(1));
}

inline std::chrono::system_clock::time_point In(std::chrono::milliseconds ms) {
  return std::chrono::system_clock::now() + ms;
}

}  // namespace baton::kvtransfer::testing

#endif  // BATON_TESTS_KVTRANSFER_KV_TEST_UTIL_H_
