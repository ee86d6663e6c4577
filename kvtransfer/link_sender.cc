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
  (void)Break(absl::CancelledError("the link was closed"));
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
  {
    absl::MutexLock lock(&mu_);
    if (!failure_.ok()) return failure_;
  }
  if (transfer.cancelled()) return absl::CancelledError("the push was cancelled");
  if (transfer.ready) {
    if (absl::Status landed = transfer.ready(transfer.deadline); !landed.ok()) return landed;
  }
  const uint64_t sequence = next_sequence_;
  if (transfer.cancelled() || !transfer.announce(sequence)) {
    return absl::CancelledError("the push ended before the transfer's turn");
  }
  ++next_sequence_;
  if (absl::Status posted = endpoint_->PostSend(transfer.blocks, transfer.block_bytes);
      !posted.ok()) {
    return Break(posted);
  }
  const absl::Time deadline =
      std::min(absl::FromChrono(transfer.deadline), absl::Now() + kLinkTransferTimeout);
  absl::Status sent = AwaitIdle(*endpoint_, deadline, [&] {
    absl::MutexLock lock(&mu_);
    return !failure_.ok() || transfer.lost();
  });
  if (!sent.ok()) {
    return Break(absl::Status(sent.code(),
                              absl::StrCat("transfer ", sequence, ": ", sent.message())));
  }
  return absl::OkStatus();
}

absl::Status LinkSender::Break(const absl::Status& why) {
  std::deque<LinkTransfer> dropped;
  absl::Status failure;
  bool first = false;
  {
    absl::MutexLock lock(&mu_);
    if (failure_.ok()) {
      failure_ = absl::UnavailableError(absl::StrCat("link ", link_id_, ": ", why.message()));
      first = true;
    }
    failure = failure_;
    dropped.swap(queue_);
  }
  if (first) endpoint_->Abort();
  for (LinkTransfer& transfer : dropped) transfer.done(failure);
  return failure;
}

}  // namespace baton::kvtransfer
