// One Decode call to a decode worker, read with a bound on every wait: Next() returns the next
// message, the stream's end, or kStalled when none came before the caller's deadline (the worker
// stopped making progress). The caller then cancels the call (its ClientContext's TryCancel) and
// collects its status (Finish), which every use must end with.
//
// Usage, on one thread:
//   DecodeStream stream(context, stub, request);     // starts the call
//   while (stream.Next(&message, deadline) == DecodeStream::Read::kMessage) { ... }
//   grpc::Status status = stream.Finish();
//
// Thread-safety: Next() and Finish() from one thread; the context's TryCancel() from any thread.
// gRPC's callbacks run on its own threads and only flip state under the mutex. The object must
// outlive the call: Finish() waits for its end.
#ifndef BATON_ROUTER_DECODE_STREAM_H_
#define BATON_ROUTER_DECODE_STREAM_H_

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "baton/v1/worker.grpc.pb.h"
#include "grpcpp/grpcpp.h"

namespace baton::router {

class DecodeStream final : public grpc::ClientReadReactor<v1::DecodeResponse> {
 public:
  enum class Read {
    kMessage,  // *message holds the next message
    kEnd,      // the stream ended (Finish() says how)
    kStalled,  // no message and no end before the deadline
  };

  // Starts the call. `context` (deadline and metadata set) must outlive Finish().
  DecodeStream(grpc::ClientContext* context, v1::DecodeWorker::Stub& stub,
               const v1::DecodeRequest& request);
  DecodeStream(const DecodeStream&) = delete;
  DecodeStream& operator=(const DecodeStream&) = delete;

  // Waits until the next message, the end of the stream, or `deadline`.
  Read Next(v1::DecodeResponse* message, absl::Time deadline);
  // Waits for the call's end and returns its status; call once. TryCancel first to end it early.
  grpc::Status Finish();

  void OnReadDone(bool ok) override;
  void OnDone(const grpc::Status& status) override;

 private:
  absl::Mutex mu_;
  v1::DecodeResponse buffer_;  // written by gRPC between StartRead and OnReadDone
  bool message_ready_ ABSL_GUARDED_BY(mu_) = false;
  bool reads_ended_ ABSL_GUARDED_BY(mu_) = false;
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  grpc::Status status_ ABSL_GUARDED_BY(mu_);
};

}  // namespace baton::router

#endif  // BATON_ROUTER_DECODE_STREAM_H_
