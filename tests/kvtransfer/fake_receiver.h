// Test-only KvReceiver: reservations are plain byte arrays laid out like a push ([layer][block]),
// every call is validated the way the KvReceiver contract asks and recorded. WriteBlocks can be
// made to stall until released (deadline tests). FillBlocks (links) writes where WriteBlocks
// would.
//
// Thread-safety: thread-safe; the Wait* helpers block the test thread until a condition holds.
#ifndef BATON_TESTS_KVTRANSFER_FAKE_RECEIVER_H_
#define BATON_TESTS_KVTRANSFER_FAKE_RECEIVER_H_

#include <cstdint>
#include <cstring>
#include <algorithm>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "kvtransfer/kv_receiver.h"

namespace baton::kvtransfer::testing {

class FakeReceiver final : public KvReceiver {
 public:
  enum class State { kReserved, kReceiving, kReceived, kAborted };

  struct Reservation {
    KvPushSpec expected;   // fingerprint and layout the push must match
    int32_t n_blocks = 0;  // blocks reserved per layer
    State state = State::kReserved;
    // The push's order (kv_push_spec.h), spelled out: (layer, block) in the order they must come.
    std::vector<std::pair<int32_t, int32_t>> order;
    size_t n_written = 0;
    std::vector<uint8_t> bytes;  // [n_layer][n_blocks][layer_block_bytes]
    absl::Status abort_reason;
  };

  struct Counts {
    int begin = 0;
    int write = 0;
    int end = 0;
    int abort = 0;
  };

  // Reserves `n_blocks` blocks per layer for pushes that match `expected` (its n_tokens unused).
  void Reserve(const KvPushSpec& expected, int32_t n_blocks) {
    absl::MutexLock lock(&mu_);
    Reservation& r = reservations_[expected.reservation_id];
    r = Reservation();
    r.expected = expected;
    r.n_blocks = n_blocks;
    r.bytes.assign(static_cast<size_t>(expected.n_layer) * n_blocks * expected.layer_block_bytes(),
                   0);
  }

  // While stalled, WriteBlocks waits (holding nothing) until Release or `max_stall` passes.
  void StallWrites() {
    absl::MutexLock lock(&mu_);
    stalled_ = true;
  }
  void Release() {
    absl::MutexLock lock(&mu_);
    stalled_ = false;
  }

  absl::Status BeginPush(const KvPushSpec& spec) override {
    absl::MutexLock lock(&mu_);
    ++counts_.begin;
    auto it = reservations_.find(spec.reservation_id);
    if (it == reservations_.end()) {
      return absl::NotFoundError(absl::StrCat("reservation '", spec.reservation_id, "'"));
    }
    Reservation& r = it->second;
    if (r.state != State::kReserved) {
      return absl::FailedPreconditionError(
          absl::StrCat("reservation '", spec.reservation_id, "' already received its KV"));
    }
    if (spec.model_fingerprint != r.expected.model_fingerprint) {
      return absl::InvalidArgumentError(absl::StrCat("model_fingerprint: expected '",
                                                     r.expected.model_fingerprint, "', got '",
                                                     spec.model_fingerprint, "'"));
    }
    if (spec.n_layer != r.expected.n_layer || spec.kv_dim != r.expected.kv_dim ||
        spec.block_size != r.expected.block_size || spec.n_blocks() > r.n_blocks) {
      return absl::InvalidArgumentError("layout mismatch");
    }
    r.expected.n_tokens = spec.n_tokens;
    r.expected.chunk_blocks = spec.chunk_blocks;
    r.expected.first_block = spec.first_block;
    r.expected.layer_windows = spec.layer_windows;
    // Ranges counted from block 0, each layer's clipped to its blocks sent (kv_push_spec.h).
    const int32_t range = spec.chunk_blocks > 0 ? spec.chunk_blocks : spec.n_blocks();
    for (int32_t begin = 0; begin < spec.n_blocks(); begin += range) {
      for (int32_t layer = 0; layer < spec.n_layer; ++layer) {
        const int32_t first = std::max(begin, spec.LayerFirstBlock(layer));
        for (int32_t block = first; block < std::min(begin + range, spec.n_blocks()); ++block) {
          r.order.emplace_back(layer, block);
        }
      }
    }
    r.state = State::kReceiving;
    return absl::OkStatus();
  }

  absl::Status WriteBlocks(const std::string& reservation_id, int32_t layer, int32_t first_block,
                           int32_t n_blocks, const KvBytePieces& data) override {
    absl::MutexLock lock(&mu_);
    ++counts_.write;
    if (stalled_) {
      mu_.AwaitWithTimeout(absl::Condition(
                               +[](bool* stalled) { return !*stalled; }, &stalled_),
                           absl::Seconds(30));
    }
    int64_t data_bytes = 0;
    for (std::span<const uint8_t> piece : data) data_bytes += static_cast<int64_t>(piece.size());
    absl::StatusOr<uint8_t*> out = CheckWriteLocked(reservation_id, layer, first_block, n_blocks,
                                                    data_bytes);
    if (!out.ok()) return out.status();
    for (std::span<const uint8_t> piece : data) {
      std::memcpy(*out, piece.data(), piece.size());
      *out += piece.size();
    }
    reservations_[reservation_id].n_written += n_blocks;
    return absl::OkStatus();
  }

  // Checked like WriteBlocks; `fill` runs with the mutex released.
  absl::Status FillBlocks(const std::string& reservation_id, int32_t layer, int32_t first_block,
                          int32_t n_blocks, const BlockFill& fill) override {
    std::vector<uint8_t*> blocks;
    size_t block_bytes = 0;
    {
      absl::MutexLock lock(&mu_);
      ++counts_.write;
      auto it = reservations_.find(reservation_id);
      if (it == reservations_.end()) return absl::NotFoundError(reservation_id);
      block_bytes = static_cast<size_t>(it->second.expected.layer_block_bytes());
      absl::StatusOr<uint8_t*> out = CheckWriteLocked(
          reservation_id, layer, first_block, n_blocks, n_blocks * int64_t(block_bytes));
      if (!out.ok()) return out.status();
      for (int32_t i = 0; i < n_blocks; ++i) blocks.push_back(*out + i * block_bytes);
    }
    if (absl::Status filled = fill(blocks, block_bytes); !filled.ok()) return filled;
    absl::MutexLock lock(&mu_);
    reservations_[reservation_id].n_written += n_blocks;
    return absl::OkStatus();
  }

  absl::Status EndPush(const std::string& reservation_id) override {
    absl::MutexLock lock(&mu_);
    ++counts_.end;
    auto it = reservations_.find(reservation_id);
    if (it == reservations_.end()) return absl::NotFoundError(reservation_id);
    Reservation& r = it->second;
    if (r.state != State::kReceiving || r.n_written != r.order.size()) {
      return absl::FailedPreconditionError("KV incomplete");
    }
    r.state = State::kReceived;
    return absl::OkStatus();
  }

  void AbortPush(const std::string& reservation_id, const absl::Status& why) override {
    absl::MutexLock lock(&mu_);
    ++counts_.abort;
    auto it = reservations_.find(reservation_id);
    if (it == reservations_.end()) return;
    it->second.state = State::kAborted;
    it->second.abort_reason = why;
  }

  Counts counts() const {
    absl::MutexLock lock(&mu_);
    return counts_;
  }
  Reservation reservation(const std::string& id) const {
    absl::MutexLock lock(&mu_);
    auto it = reservations_.find(id);
    return it == reservations_.end() ? Reservation() : it->second;
  }

  // True once at least `n` aborts (begins, writes) were recorded, false after `timeout`.
  bool WaitForAborts(int n, absl::Duration timeout = absl::Seconds(10)) const {
    return WaitFor([this, n]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return counts_.abort >= n; },
                   timeout);
  }
  bool WaitForBegins(int n, absl::Duration timeout = absl::Seconds(10)) const {
    return WaitFor([this, n]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return counts_.begin >= n; },
                   timeout);
  }
  bool WaitForWrites(int n, absl::Duration timeout = absl::Seconds(10)) const {
    return WaitFor([this, n]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return counts_.write >= n; },
                   timeout);
  }

 private:
  // Where a chunk's data go, once the write is valid: state, range, size, the push's order.
  absl::StatusOr<uint8_t*> CheckWriteLocked(const std::string& reservation_id, int32_t layer,
                                            int32_t first_block, int32_t n_blocks,
                                            int64_t data_bytes) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    auto it = reservations_.find(reservation_id);
    if (it == reservations_.end()) return absl::NotFoundError(reservation_id);
    Reservation& r = it->second;
    if (r.state != State::kReceiving) return absl::FailedPreconditionError("not receiving");
    const int64_t block_bytes = r.expected.layer_block_bytes();
    if (n_blocks <= 0 || first_block + n_blocks > r.expected.n_blocks() ||
        data_bytes != n_blocks * block_bytes) {
      return absl::InvalidArgumentError("bad block range or size");
    }
    for (int32_t i = 0; i < n_blocks; ++i) {
      const size_t at = r.n_written + i;
      if (at >= r.order.size() || r.order[at] != std::make_pair(layer, first_block + i)) {
        return absl::InvalidArgumentError(
            absl::StrCat("out of order: layer ", layer, " block ", first_block + i));
      }
    }
    return r.bytes.data() + (int64_t{layer} * r.n_blocks + first_block) * block_bytes;
  }

  template <typename Predicate>
  bool WaitFor(Predicate predicate, absl::Duration timeout) const {
    absl::MutexLock lock(&mu_);
    return mu_.AwaitWithTimeout(absl::Condition(&predicate), timeout);
  }

  mutable absl::Mutex mu_;
  std::map<std::string, Reservation> reservations_ ABSL_GUARDED_BY(mu_);
  bool stalled_ ABSL_GUARDED_BY(mu_) = false;
  Counts counts_ ABSL_GUARDED_BY(mu_);
};

}  // namespace baton::kvtransfer::testing

#endif  // BATON_TESTS_KVTRANSFER_FAKE_RECEIVER_H_
