// One client-streaming PushKv call of a gRPC KV push: a queue of outgoing messages that the
// callback reactor drains one write at a time, so the sender never waits for the network.
//
// Lifetime: the owner (GrpcKvPush) creates the stream, calls Start, Enqueue..., then Close or
// Cancel (at least one of them: until then a hold keeps the call open), and destroys the stream
// only after `on_done` ran. `on_done` is the last thing the stream does.
//
// Thread-safety: Enqueue, Close and Cancel may be called from any thread, concurrently with the
// reactions; `on_done` runs on a gRPC thread.
#ifndef BATON_KVTRANSFER_GRPC_PUSH_STREAM_H_
#define BATON_KVTRANSFER_GRPC_PUSH_STREAM_H_

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "baton/v1/kv_transfer.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "rpc/server_options.h"

namespace baton::kvtransfer {

class GrpcPushStream final : public grpc::ClientWriteReactor<v1::KvPushMessage> {
 public:
  // Called once with the call's final status and the receiver's response.
  using DoneCallback =
      std::function<void(int32_t stream_index, const absl::Status&, const v1::KvPushResponse&)>;

  GrpcPushStream(int32_t stream_index, DoneCallback on_done);
  GrpcPushStream(const GrpcPushStream&) = delete;
  GrpcPushStream& operator=(const GrpcPushStream&) = delete;

  // Opens the call (token and deadline applied) with `header` as its first message.
  void Start(v1::KvTransfer::Stub* stub, const rpc::ClientOptions& options,
             std::chrono::system_clock::time_point deadline, v1::KvPushHeader header);

  // Queues a message behind the ones already queued. False (message dropped) once the stream is
  // closed, cancelled or broken; the final status then comes through `on_done`.
  bool Enqueue(std::unique_ptr<v1::KvPushMessage> message);

  // No more messages: half-closes once the queue has drained.
  void Close();

  // Abandons the call; the receiver sees it cancelled. Safe at any time, also after on_done.
  void Cancel();

 private:
  void OnWriteDone(bool ok) override;
  void OnDone(const grpc::Status& status) override;

  // Starts the next write, or the half-close once closing and drained.
  void StartNextLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Lets the call end (OnDone) once its operations are over; once only.
  void ReleaseHoldLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const int32_t stream_index_;
  const DoneCallback on_done_;
  grpc::ClientContext context_;
  v1::KvPushResponse response_;

  // Operations started from outside reactions (Enqueue, Close, Cancel) start under mu_, and the
  // hold is released under mu_, so no operation can start on a call that has ended.
  absl::Mutex mu_;
  std::deque<std::unique_ptr<v1::KvPushMessage>> queue_ ABSL_GUARDED_BY(mu_);  // front: in flight
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool closing_ ABSL_GUARDED_BY(mu_) = false;
  bool writes_done_started_ ABSL_GUARDED_BY(mu_) = false;
  bool broken_ ABSL_GUARDED_BY(mu_) = false;  // a write failed or Cancel: write nothing more
  bool holding_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace baton::kvtransfer

#endif  // BATON_KVTRANSFER_GRPC_PUSH_STREAM_H_
