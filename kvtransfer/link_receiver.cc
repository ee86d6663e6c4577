#include "kvtransfer/link_receiver.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace baton::kvtransfer {

LinkReceiver::LinkReceiver(std::string link_id, std::unique_ptr<LinkEndpoint> endpoint)
    : link_id_(std::move(link_id)), endpoint_(std::move(endpoint)) {}

LinkReceiver::~LinkReceiver() { Break(absl::CancelledError("the link was closed")); }

bool LinkReceiver::TurnOf(uint64_t sequence) const {
  return broken_.load() || next_sequence_ == sequence;
}

absl::Status LinkReceiver::Receive(uint64_t sequence, std::span<uint8_t* const> blocks,
                                   size_t block_bytes, absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  if (sequence < next_sequence_) {
    return MarkBroken(absl::InvalidArgumentError(absl::StrCat(
        "transfer ", sequence, " announced after transfer ", next_sequence_ - 1, " was received")));
  }
  struct Turn {
    const LinkReceiver* self;
    uint64_t sequence;
    bool operator()() const ABSL_NO_THREAD_SAFETY_ANALYSIS { return self->TurnOf(sequence); }
  } turn{this, sequence};
  if (!mu_.AwaitWithDeadline(absl::Condition(&turn), deadline)) {
    return MarkBroken(absl::DeadlineExceededError(absl::StrCat(
        "transfer ", sequence, " waited in vain for transfer ", next_sequence_,
        " (announced on another push) to arrive")));
  }
  if (broken_.load()) return Failure();
  if (absl::Status posted = endpoint_->PostReceive(blocks, block_bytes); !posted.ok()) {
    return MarkBroken(posted);
  }
  ++next_sequence_;
  absl::Status done = AwaitIdle(*endpoint_, deadline, [this] { return broken_.load(); });
  if (!done.ok()) {
    return MarkBroken(absl::Status(done.code(),
                                   absl::StrCat("transfer ", sequence, ": ", done.message())));
  }
  return absl::OkStatus();
}

void LinkReceiver::Break(const absl::Status& why) {
  (void)MarkBroken(why);
  // Wakes receives waiting for their turn (they re-check it whenever mu_ is released).
  absl::MutexLock lock(&mu_);
}

absl::Status LinkReceiver::MarkBroken(const absl::Status& why) {
  {
    absl::MutexLock lock(&failure_mu_);
    if (failure_.ok()) {
      failure_ = absl::UnavailableError(absl::StrCat("link ", link_id_, ": ", why.message()));
    }
  }
  broken_.store(true);
  // Every caller aborts, not only the first: Abort returns once the endpoint's transfers are over
  // (a second caller waits for the first's), and this caller may be about to give its blocks back.
  endpoint_->Abort();
  return Failure();
}

absl::Status LinkReceiver::Failure() const {
  absl::MutexLock lock(&failure_mu_);
  return failure_;
}

}  // namespace baton::kvtransfer
