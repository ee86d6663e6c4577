#include "kvtransfer/grpc_push_stream.h"

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "baton/v1/kv_transfer.grpc.pb.h"
#include "kvtransfer/kv_chunk_codec.h"
#include "rpc/status.h"

namespace baton::kvtransfer {

const std::string& PushKvMethod() {
  static const std::string* method =
      new std::string(absl::StrCat("/", v1::KvTransfer::service_full_name(), "/PushKv"));
  return *method;
}

GrpcPushStream::GrpcPushStream(int32_t stream_index, DoneCallback on_done,
                               WrittenCallback on_written)
    : stream_index_(stream_index),
      on_done_(std::move(on_done)),
      on_written_(std::move(on_written)) {}

void GrpcPushStream::Start(grpc::GenericStub* stub, const rpc::ClientOptions& options,
                           std::chrono::system_clock::time_point deadline,
                           const v1::KvPushHeader& header) {
  rpc::PrepareContext(context_, options, deadline);
  v1::KvPushMessage message;
  *message.mutable_header() = header;
  stub->PrepareBidiStreamingCall(&context_, PushKvMethod(), grpc::StubOptions(), this);
  StartRead(&response_buffer_);  // the one response, sent when the push concludes
  {
    absl::MutexLock lock(&mu_);
    // Writes are started from outside reactions (Enqueue, Close); the hold keeps OnDone away
    // until Close or Cancel says no more will come.
    AddHold();
    holding_ = true;
    queue_.push_back(EncodeProtoMessage(message));
    StartNextLocked();  // queued by gRPC until StartCall
  }
  StartCall();
}

bool GrpcPushStream::Enqueue(grpc::ByteBuffer message) {
  absl::MutexLock lock(&mu_);
  if (closing_ || broken_) return false;
  queue_.push_back(std::move(message));
  StartNextLocked();
  return true;
}

int32_t GrpcPushStream::queued() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int32_t>(queue_.size());
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
    StartWrite(&queue_.front());
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
  {
    absl::MutexLock lock(&mu_);
    writing_ = false;
    queue_.pop_front();  // frees the message's bytes
    if (!ok) {
      // The call is over (the receiver answered with an error, or it broke); OnDone brings why.
      broken_ = true;
      queue_.clear();
      ReleaseHoldLocked();
    } else {
      StartNextLocked();
    }
  }
  on_written_();
}

void GrpcPushStream::OnReadDone(bool ok) {
  // ok: the response. Not ok: the call ended without one (the status says why).
  if (ok) response_error_ = DecodeProtoMessage(response_buffer_, "KvPushResponse", &response_);
  // Either way the receiver has ended the call (it answers as it ends it): write nothing more,
  // and let the call end now, so that its outcome reaches the owner without waiting for Close.
  absl::MutexLock lock(&mu_);
  broken_ = true;
  while (queue_.size() > (writing_ ? 1u : 0u)) queue_.pop_back();
  ReleaseHoldLocked();
}

void GrpcPushStream::OnDone(const grpc::Status& status) {
  absl::Status result = rpc::FromGrpcStatus(status);
  if (result.ok() && !response_error_.ok()) result = response_error_;
  on_done_(stream_index_, result, response_);
}

}  // namespace baton::kvtransfer
