// The server side of one Generate call: owns the stream to the client and hands the request to a
// RequestDriver on the request pool.
//
// Writes: one in flight at a time, the rest queued in order; the driver's Send() blocks while
// kMaxQueuedWrites are queued (back-pressure from a slow client reaches the decode stream).
// Close() finishes the stream once the queued writes are out. OnCancel (client gone, deadline,
// server shutdown) cancels the driver, which frees what the request holds and then closes. The
// reactor deletes itself in OnDone; the driver is shared between it and the pool task.
//
// Thread-safety: gRPC calls the reactions; the driver's thread calls Send/Close. All shared
// state is under mu_, and no gRPC operation is started while holding it.
#ifndef BATON_ROUTER_GENERATE_REACTOR_H_
#define BATON_ROUTER_GENERATE_REACTOR_H_

#include <atomic>
#include <deque>
#include <memory>
#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "baton/v1/router.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "router/request_driver.h"
#include "router/request_pool.h"

namespace baton::router {

// What a Generate call needs from the router; owned by the Router, outliving every call.
struct GenerateEnv {
  RequestDriverDeps driver;
  RequestPool* pool = nullptr;
  absl::Duration request_timeout = absl::Minutes(10);  // when the client sets no deadline
  const std::atomic<bool>* draining = nullptr;         // true: refuse new requests
};

class GenerateReactor final : public grpc::ServerWriteReactor<v1::GenerateResponse>,
                              public ResponseSink {
 public:
  static constexpr size_t kMaxQueuedWrites = 64;

  // Checks the call (auth, draining, request id), then submits the request to the pool; or
  // finishes the call at once with the error.
  GenerateReactor(grpc::CallbackServerContext* context, const v1::GenerateRequest& request,
                  const GenerateEnv& env);

  bool Send(v1::GenerateResponse response) override;
  void Close(const absl::Status& status) override;

  void OnWriteDone(bool ok) override;
  void OnCancel() override;
  void OnDone() override;

 private:
  ~GenerateReactor() override = default;
  void Start(grpc::CallbackServerContext* context, const v1::GenerateRequest& request);

  const GenerateEnv& env_;
  std::shared_ptr<RequestDriver> driver_;  // set before any reaction can run

  absl::Mutex mu_;
  v1::GenerateResponse writing_ ABSL_GUARDED_BY(mu_);  // the message in flight
  bool write_in_flight_ ABSL_GUARDED_BY(mu_) = false;
  std::deque<v1::GenerateResponse> queued_ ABSL_GUARDED_BY(mu_);
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  std::optional<grpc::Status> finish_ ABSL_GUARDED_BY(mu_);  // Close()d with writes in flight
};

}  // namespace baton::router

#endif  // BATON_ROUTER_GENERATE_REACTOR_H_
