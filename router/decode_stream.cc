#include "router/decode_stream.h"

#include <utility>

namespace baton::router {

DecodeStream::DecodeStream(grpc::ClientContext* context, v1::DecodeWorker::Stub& stub,
                           const v1::DecodeRequest& request) {
  stub.async()->Decode(context, &request, this);
  StartRead(&buffer_);
  // Held until Finish(): the call cannot end (OnDone) between a message and the next StartRead.
  AddHold();
  StartCall();
}

DecodeStream::Read DecodeStream::Next(v1::DecodeResponse* message, absl::Time deadline) {
  {
    absl::MutexLock lock(&mu_);
    auto arrived = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
      return message_ready_ || reads_ended_;
    };
    if (!mu_.AwaitWithDeadline(absl::Condition(&arrived), deadline)) return Read::kStalled;
    if (!message_ready_) return Read::kEnd;
    message_ready_ = false;
    *message = std::move(buffer_);
  }
  // No read is outstanding here, so the buffer is ours until this one starts.
  buffer_.Clear();
  StartRead(&buffer_);
  return Read::kMessage;
}

grpc::Status DecodeStream::Finish() {
  RemoveHold();
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(&done_));
  return status_;
}

void DecodeStream::OnReadDone(bool ok) {
  absl::MutexLock lock(&mu_);
  if (ok) {
    message_ready_ = true;
  } else {
    reads_ended_ = true;
  }
}

void DecodeStream::OnDone(const grpc::Status& status) {
  absl::MutexLock lock(&mu_);
  status_ = status;
  done_ = true;
}

}  // namespace baton::router
