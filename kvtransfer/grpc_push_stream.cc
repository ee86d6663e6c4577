#include "kvtransfer/grpc_push_stream.h"

#include <utility>

#include "rpc/status.h"

namespace baton::kvtransfer {

GrpcPushStream::GrpcPushStream(int32_t stream_index, DoneCallback on_done)
    : stream_index_(stream_index), on_done_(std::move(on_done)) {}

void GrpcPushStream::Start(v1::KvTransfer::Stub* stub, const rpc::ClientOptions& options,
                           std::chrono::system_clock::time_point deadline,
                           v1::KvPushHeader header) {
  rpc::PrepareContext(context_, options, deadline);
  auto message = std::make_unique<v1::KvPushMessage>();
  *message->mutable_header() = std::move(header);
  stub->async()->PushKv(&context_, &response_, this);
  {
    absl::MutexLock lock(&mu_);
    // Writes are started from outside reactions (Enqueue, Close); the hold keeps OnDone away
    // until Close or Cancel says no more will come.
    AddHold();
    holding_ = true;
    queue_.push_back(std::move(message));
    StartNextLocked();  // queued by gRPC until StartCall
  }
  StartCall();
}

bool GrpcPushStream::Enqueue(std::unique_ptr<v1::KvPushMessage> message) {
  absl::MutexLock lock(&mu_);
  if (closing_ || broken_) return false;
  queue_.push_back(std::move(message));
  StartNextLocked();
  return true;
}

void GrpcPushStream::Close() {
  absl::MutexLock lock(&mu_);
  if (closing_) return;
  closing_ = true;
  StartNextLocked();
  ReleaseHoldLocked();
}

void GrpcPushStream::Cancel() {
  // The context outlives the call, so this is safe even after OnDone.
  context_.TryCancel();
  absl::MutexLock lock(&mu_);
  closing_ = true;
  broken_ = true;
  // Drop what has not started; the write in flight (the front) fails on its own.
  while (queue_.size() > (writing_ ? 1u : 0u)) queue_.pop_back();
  ReleaseHoldLocked();
}

void GrpcPushStream::StartNextLocked() {
  if (writing_ || broken_) return;
  if (!queue_.empty()) {
    writing_ = true;
    StartWrite(queue_.front().get());
  } else if (closing_ && !writes_done_started_) {
    writes_done_started_ = true;
    StartWritesDone();
  }
}

void GrpcPushStream::ReleaseHoldLocked() {
  if (!holding_) return;
  holding_ = false;
  RemoveHold();  // never runs OnDone inline: gRPC schedules it
}

void GrpcPushStream::OnWriteDone(bool ok) {
  absl::MutexLock lock(&mu_);
  writing_ = false;
  queue_.pop_front();  // frees the chunk's bytes
  if (!ok) {
    // The call is over (the receiver answered with an error, or it broke); OnDone brings why.
    broken_ = true;
    queue_.clear();
    ReleaseHoldLocked();
    return;
  }
  StartNextLocked();
}

void GrpcPushStream::OnDone(const grpc::Status& status) {
  on_done_(stream_index_, rpc::FromGrpcStatus(status), response_);
}

}  // namespace baton::kvtransfer
