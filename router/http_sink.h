// The ResponseSink of one HTTP request: the RequestDriver (on a pool thread) queues its messages
// here, and the HTTP connection (on its strand, router/http_connection.h) takes them out and
// writes them to the client. Nothing on the HTTP side ever blocks on the sink.
//
// Send() blocks while kMaxQueued messages wait: the connection takes messages only once its
// previous write is out, so a client that does not read slows the decode stream down. Send()
// returns false once the client is gone (Abandon()), which makes the driver stop and free what the
// request holds; Abandon() also cancels the driver at once, so a request waiting in the queue or
// in a worker call stops too. Cancel() is the server's cancellation (shutdown): the driver stops
// and closes the sink with CANCELLED, and the client is still told.
//
// `on_ready` tells the HTTP side that there is something to Take(): it runs once each time the
// sink goes from nothing to take to a message or the end, and not again before the next Take().
// It runs on the driver's thread with the sink's lock held, so it must only hand the work over
// (asio::post) and never call back into the sink. Detach() ends those calls: none runs after it
// returns.
//
// Thread-safety: thread-safe. set_driver() before the driver is launched.
#ifndef BATON_ROUTER_HTTP_SINK_H_
#define BATON_ROUTER_HTTP_SINK_H_

#include <cstddef>
#include <deque>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "baton/v1/router.pb.h"
#include "router/request_driver.h"

namespace baton::router {

class HttpSink final : public ResponseSink {
 public:
  static constexpr size_t kMaxQueued = 64;

  explicit HttpSink(absl::AnyInvocable<void()> on_ready) : on_ready_(std::move(on_ready)) {}

  void set_driver(std::shared_ptr<RequestDriver> driver) { driver_ = std::move(driver); }

  // ResponseSink, called by the driver.
  bool Send(v1::GenerateResponse response) override;
  void Close(const absl::Status& status) override;

  // Everything queued, in order; `closed` (with the request's status) once the driver closed the
  // sink and every message before the end is in `messages` (of this or an earlier Take()).
  struct Taken {
    std::vector<v1::GenerateResponse> messages;
    bool closed = false;
    absl::Status status;
  };
  Taken Take();

  // No on_ready call after this returns. Idempotent.
  void Detach();
  // The client went away. Idempotent.
  void Abandon();
  // The server gives up on the request (drain deadline at shutdown). Idempotent.
  void Cancel();

 private:
  void SignalLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  std::shared_ptr<RequestDriver> driver_;

  absl::Mutex mu_;
  absl::AnyInvocable<void()> on_ready_ ABSL_GUARDED_BY(mu_);
  bool signalled_ ABSL_GUARDED_BY(mu_) = false;  // on_ready ran since the last Take()
  std::deque<v1::GenerateResponse> queue_ ABSL_GUARDED_BY(mu_);
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status status_ ABSL_GUARDED_BY(mu_);
  bool abandoned_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace baton::router

#endif  // BATON_ROUTER_HTTP_SINK_H_
