// The bounded set of threads that drive requests. A request's blocking client calls to workers
// run here, never on a gRPC callback thread.
//
// Threads start on demand up to `max_threads` and then stay; a task submitted while every thread
// is busy waits in FIFO order for the next free one.
//
// Thread-safety: thread-safe. Stop() may be called once from any thread that is not a pool thread.
#ifndef BATON_ROUTER_REQUEST_POOL_H_
#define BATON_ROUTER_REQUEST_POOL_H_

#include <deque>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/synchronization/mutex.h"

namespace baton::router {

class RequestPool {
 public:
  explicit RequestPool(int max_threads);
  ~RequestPool();  // Stop()
  RequestPool(const RequestPool&) = delete;
  RequestPool& operator=(const RequestPool&) = delete;

  // Runs `task` on a pool thread (at once when one is free). False, without running it, after
  // Stop().
  bool Submit(absl::AnyInvocable<void() &&> task);

  // Whether a task submitted now would wait for a thread.
  bool Saturated();

  // Refuses new tasks, runs the ones already submitted, and joins every thread.
  void Stop();

 private:
  void Loop();

  const int max_threads_;
  absl::Mutex mu_;
  std::deque<absl::AnyInvocable<void() &&>> tasks_ ABSL_GUARDED_BY(mu_);
  std::vector<std::thread> threads_ ABSL_GUARDED_BY(mu_);
  int idle_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace baton::router

#endif  // BATON_ROUTER_REQUEST_POOL_H_
