// The ResponseSink of one HTTP request: the RequestDriver (on a pool thread) queues its messages
// here, and the HTTP handler or the streaming content provider (on an httplib thread) takes them
// out and writes them to the client.
//
// Send() blocks while kMaxQueued messages wait (a slow client slows the decode stream down), and
// returns false once the client is gone (Abandon()), which makes the driver stop and free what the
// request holds. Abandon() also cancels the driver at once, so a request waiting in the queue or
// in a worker call stops too. Cancel() is the server's cancellation (shutdown): the driver stops
// and closes the sink with CANCELLED, and the client is still told.
//
// Thread-safety: thread-safe. set_driver() before the driver is launched.
#ifndef BATON_ROUTER_HTTP_SINK_H_
#define BATON_ROUTER_HTTP_SINK_H_

#include <cstddef>
#include <deque>
#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "baton/v1/router.pb.h"
#include "router/request_driver.h"

namespace baton::router {

class HttpSink final : public ResponseSink {
 public:
  static constexpr size_t kMaxQueued = 64;

  void set_driver(std::shared_ptr<RequestDriver> driver) { driver_ = std::move(driver); }

  // ResponseSink, called by the driver.
  bool Send(v1::GenerateResponse response) override;
  void Close(const absl::Status& status) override;

  // What the HTTP side takes out: a message, the end (with the request's status; every message
  // queued before it has been taken), or nothing before the deadline.
  struct Event {
    enum class Kind { kNone, kMessage, kClosed };
    Kind kind = Kind::kNone;
    v1::GenerateResponse message;
    absl::Status status;
  };
  Event Next(absl::Time deadline);
  // Waits until a message is queued or the sink is closed (true), or `deadline` (false). Takes
  // nothing out.
  bool WaitForEvent(absl::Time deadline);

  // The client went away. Idempotent.
  void Abandon();
  // The server gives up on the request (drain deadline at shutdown). Idempotent.
  void Cancel();

 private:
  std::shared_ptr<RequestDriver> driver_;

  absl::Mutex mu_;
  std::deque<v1::GenerateResponse> queue_ ABSL_GUARDED_BY(mu_);
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status status_ ABSL_GUARDED_BY(mu_);
  bool abandoned_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace baton::router

#endif  // BATON_ROUTER_HTTP_SINK_H_
