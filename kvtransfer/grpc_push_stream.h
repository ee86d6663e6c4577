// One PushKv call of a gRPC KV push, raw (kv_chunk_codec.h): a queue of encoded messages that
// the callback reactor writes one at a time, so the sender never waits for the network. The call
// goes through the generic stub, so the messages are the bytes the encoder made (no protobuf
// copy); the receiver's answer is one KvPushResponse.
//
// Lifetime: the owner (GrpcKvPush) creates the stream, calls Start, Enqueue..., then Close or
// Cancel (at least one of them: until then, or until the receiver ends the call, a hold keeps
// the call open), and destroys the stream only after `on_done` ran. `on_done` is the last thing
// the stream does. A receiver that ends the call early (it failed the push) ends it at once:
// `on_done` then comes without waiting for Close, and later messages are dropped.
//
// Thread-safety: Enqueue, Close, Cancel and queued() may be called from any thread, concurrently
// with the reactions; `on_done` and `on_written` run on gRPC threads, outside the stream's lock.
#ifndef BATON_KVTRANSFER_GRPC_PUSH_STREAM_H_
#define BATON_KVTRANSFER_GRPC_PUSH_STREAM_H_

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "baton/v1/kv_transfer.pb.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "rpc/server_options.h"

namespace baton::kvtransfer {

// "/baton.v1.KvTransfer/PushKv": the method the generic stub calls.
const std::string& PushKvMethod();

class GrpcPushStream final : public grpc::ClientBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer> {
 public:
  // Called once with the call's final status and the receiver's response.
  using DoneCallback =
      std::function<void(int32_t stream_index, const absl::Status&, const v1::KvPushResponse&)>;
  // Called after each message is written: the queue has room for another.
  using WrittenCallback = std::function<void()>;

  GrpcPushStream(int32_t stream_index, DoneCallback on_done, WrittenCallback on_written);
  GrpcPushStream(const GrpcPushStream&) = delete;
  GrpcPushStream& operator=(const GrpcPushStream&) = delete;

  // Opens the call (token and deadline applied) with `header` as its first message.
  void Start(grpc::GenericStub* stub, const rpc::ClientOptions& options,
             std::chrono::system_clock::time_point deadline, const v1::KvPushHeader& header);

  // Queues an encoded KvPushMessage behind the ones already queued. False (message dropped) once
  // the stream is closed, cancelled or broken; the final status then comes through `on_done`.
  bool Enqueue(grpc::ByteBuffer message);

  // Messages queued and not yet written, the one being written included.
  int32_t queued() const;

  // No more messages: half-closes once the queue has drained.
  void Close();

  // Abandons the call; the receiver sees it cancelled. Safe at any time, also after on_done.
  void Cancel();

 private:
  void OnWriteDone(bool ok) override;
  void OnReadDone(bool ok) override;
  void OnDone(const grpc::Status& status) override;

  // Starts the next write, or the half-close once closing and drained.
  void StartNextLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Lets the call end (OnDone) once its operations are over; once only.
  void ReleaseHoldLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const int32_t stream_index_;
  const DoneCallback on_done_;
  const WrittenCallback on_written_;
  grpc::ClientContext context_;
  grpc::ByteBuffer response_buffer_;  // the read in flight
  v1::KvPushResponse response_;       // set by OnReadDone, read by OnDone
  absl::Status response_error_;       // a response that did not parse

  // Operations started from outside reactions (Enqueue, Close, Cancel) start under mu_, and the
  // hold is released under mu_, so no operation can start on a call that has ended.
  mutable absl::Mutex mu_;
  std::deque<grpc::ByteBuffer> queue_ ABSL_GUARDED_BY(mu_);  // front: in flight
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool closing_ ABSL_GUARDED_BY(mu_) = false;
  bool writes_done_started_ ABSL_GUARDED_BY(mu_) = false;
  bool broken_ ABSL_GUARDED_BY(mu_) = false;  // a write failed or Cancel: write nothing more
  bool holding_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace baton::kvtransfer

#endif  // BATON_KVTRANSFER_GRPC_PUSH_STREAM_H_
