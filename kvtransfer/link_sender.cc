#include "kvtransfer/link_sender.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "kvtransfer/push_assembler.h"

namespace baton::kvtransfer {

LinkSender::LinkSender(std::string link_id, std::unique_ptr<LinkEndpoint> endpoint)
    : link_id_(std::move(link_id)), endpoint_(std::move(endpoint)) {
  thread_ = std::thread([this] { Loop(); });
}

LinkSender::~LinkSender() {
  Break(absl::CancelledError("the link was closed"));
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  thread_.join();
}

bool LinkSender::broken() const {
  absl::MutexLock lock(&mu_);
  return !failure_.ok();
}

void LinkSender::Submit(LinkTransfer transfer) {
  absl::Status failure;
  {
    absl::MutexLock lock(&mu_);
    failure = failure_;
    if (failure.ok()) {
      queue_.push_back(std::move(transfer));
      return;
    }
  }
  transfer.done(failure);
}

void LinkSender::Loop() {
  while (true) {
    LinkTransfer transfer;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](LinkSender* self) ABSL_NO_THREAD_SAFETY_ANALYSIS {
            return self->stopping_ || !self->queue_.empty();
          },
          this));
      if (queue_.empty()) return;  // stopping, nothing left
      transfer = std::move(queue_.front());
      queue_.pop_front();
    }
    const absl::Status outcome = Run(transfer);
    transfer.done(outcome);
  }
}

absl::Status LinkSender::Run(LinkTransfer& transfer) {
  if (absl::Status failed = Failure(); !failed.ok()) return failed;
  if (transfer.cancelled()) return absl::CancelledError("the push was cancelled");
  if (transfer.ready) {
    const auto bound = std::chrono::system_clock::now() +
                       absl::ToChronoMilliseconds(kLinkTransferTimeout);
    if (absl::Status landed = transfer.ready(std::min(transfer.deadline, bound)); !landed.ok()) {
      return landed;
    }
  }
  const uint64_t sequence = next_sequence_;
  if (transfer.cancelled() || !transfer.announce(sequence)) {
    return absl::CancelledError("the push ended before the transfer's turn");
  }
  ++next_sequence_;
  if (absl::Status posted = endpoint_->PostSend(transfer.blocks, transfer.block_bytes);
      !posted.ok()) {
    Break(posted);
    return Failure();
  }
  const absl::Time deadline =
      std::min(absl::FromChrono(transfer.deadline), absl::Now() + kLinkTransferTimeout);
  absl::Status sent =
      AwaitIdle(*endpoint_, deadline, [&] { return !Failure().ok() || transfer.lost(); });
  if (!sent.ok()) {
    Break(absl::Status(sent.code(), absl::StrCat("transfer ", sequence, ": ", sent.message())));
    return Failure();
  }
  return absl::OkStatus();
}

absl::Status LinkSender::Failure() const {
  absl::MutexLock lock(&mu_);
  return failure_;
}

void LinkSender::Break(const absl::Status& why) {
  std::deque<LinkTransfer> dropped;
  absl::Status failure;
  {
    absl::MutexLock lock(&mu_);
    if (failure_.ok()) {
      failure_ = absl::UnavailableError(absl::StrCat("link ", link_id_, ": ", why.message()));
    }
    failure = failure_;
    dropped.swap(queue_);
  }
  // Every caller aborts (a second waits for the first's abort): once this returns, no transfer
  // reads its blocks any more.
  endpoint_->Abort();
  for (LinkTransfer& transfer : dropped) transfer.done(failure);
}

}  // namespace baton::kvtransfer
