// CreateInProcessKvTransport: a push that calls the KvReceiver directly, on the caller's thread.
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "kvtransfer/kv_transport.h"
#include "kvtransfer/kv_wire.h"
#include "kvtransfer/push_cursor.h"

namespace baton::kvtransfer {
namespace {

class InProcessKvPush final : public KvPush {
 public:
  InProcessKvPush(KvReceiver* receiver, const KvPushSpec& spec,
                  std::chrono::system_clock::time_point deadline)
      : receiver_(receiver),
        spec_(spec),
        deadline_(deadline),
        started_(std::chrono::steady_clock::now()),
        cursor_(spec) {}

  ~InProcessKvPush() override { Cancel(); }

  std::string_view transport_name() const override { return "in_process"; }

  absl::Status SendLayer(int32_t layer, const std::vector<const uint8_t*>& blocks,
                         BlocksReady ready) override {
    if (state_ != State::kOpen) {
      return absl::FailedPreconditionError(
          absl::StrCat("push to reservation '", spec_.reservation_id, "' is no longer open"));
    }
    absl::Status status = cursor_.CheckSendLayer(layer, blocks);
    if (status.ok() && std::chrono::system_clock::now() > deadline_) {
      status = absl::DeadlineExceededError(absl::StrCat(
          "push to reservation '", spec_.reservation_id, "' passed its deadline at layer ", layer));
    }
    if (status.ok() && ready) status = ready(deadline_);
    if (status.ok()) {
      // The range's blocks of this layer in one write, straight from the sender's blocks.
      pieces_.clear();
      for (const uint8_t* block : blocks) {
        pieces_.emplace_back(block, static_cast<size_t>(spec_.layer_block_bytes()));
      }
      status = receiver_->WriteBlocks(spec_.reservation_id, layer, cursor_.block(),
                                      static_cast<int32_t>(blocks.size()), pieces_);
    }
    if (!status.ok()) {
      Fail(status);
      return status;
    }
    stats_.bytes_sent += spec_.layer_block_bytes() * static_cast<int64_t>(blocks.size());
    ++stats_.chunks_sent;
    cursor_.Advance(static_cast<int32_t>(blocks.size()));
    return absl::OkStatus();
  }

  // Writes happen inside SendLayer: nothing reads the blocks afterwards.
  void WhenBlocksReleased(std::function<void()> release) override { release(); }

  absl::StatusOr<KvPushStats> Finish() override {
    if (state_ != State::kOpen) {
      return absl::FailedPreconditionError(absl::StrCat(
          "Finish on a push to reservation '", spec_.reservation_id, "' that is no longer open"));
    }
    absl::Status status;
    if (!cursor_.done()) {
      status = absl::FailedPreconditionError(
          absl::StrCat("Finish before the data of ", cursor_.Describe()));
    } else if (std::chrono::system_clock::now() > deadline_) {
      status = absl::DeadlineExceededError(
          absl::StrCat("push to reservation '", spec_.reservation_id, "' passed its deadline"));
    } else {
      status = receiver_->EndPush(spec_.reservation_id);
    }
    if (!status.ok()) {
      Fail(status);
      return status;
    }
    state_ = State::kDone;
    stats_.seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count();
    return stats_;
  }

  void Cancel() override {
    if (state_ == State::kOpen) {
      Fail(absl::CancelledError(
          absl::StrCat("push to reservation '", spec_.reservation_id, "' cancelled by sender")));
    }
  }

 private:
  enum class State { kOpen, kDone, kFailed };

  // The one place a push turns failed: the receiver frees the reservation, once.
  void Fail(const absl::Status& why) {
    state_ = State::kFailed;
    receiver_->AbortPush(spec_.reservation_id, why);
  }

  KvReceiver* const receiver_;
  const KvPushSpec spec_;
  const std::chrono::system_clock::time_point deadline_;
  const std::chrono::steady_clock::time_point started_;
  State state_ = State::kOpen;
  PushCursor cursor_;
  KvBytePieces pieces_;  // one layer's blocks, reused
  KvPushStats stats_;
};

class InProcessKvTransport final : public KvTransport {
 public:
  std::string_view name() const override { return "in_process"; }
  explicit InProcessKvTransport(KvReceiver* receiver) : receiver_(receiver) {}

  absl::StatusOr<std::unique_ptr<KvPush>> StartPush(
      const std::string& destination, const KvPushSpec& spec,
      std::chrono::system_clock::time_point deadline) override {
    if (absl::Status valid = ValidateSpec(spec); !valid.ok()) return valid;
    if (absl::Status begun = receiver_->BeginPush(spec); !begun.ok()) return begun;
    return std::make_unique<InProcessKvPush>(receiver_, spec, deadline);
  }

 private:
  KvReceiver* const receiver_;
};

}  // namespace

std::unique_ptr<KvTransport> CreateInProcessKvTransport(KvReceiver* receiver) {
  return std::make_unique<InProcessKvTransport>(receiver);
}

}  // namespace baton::kvtransfer
