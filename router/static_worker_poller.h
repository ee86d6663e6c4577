// Keeps the registry's view of statically listed workers (router flags --prefill / --decode /
// --colocated) fresh: every heartbeat interval it calls each one's Status RPC (asynchronously, at
// most one call per worker in flight, each with a deadline of one heartbeat timeout) and reports
// the answer to the registry as that worker's heartbeat, or the failure.
//
// Thread-safety: thread-safe. Start() and Stop() once each, Stop() not from a gRPC callback.
#ifndef BATON_ROUTER_STATIC_WORKER_POLLER_H_
#define BATON_ROUTER_STATIC_WORKER_POLLER_H_

#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "router/worker_channels.h"
#include "router/worker_registry.h"

namespace baton::router {

class StaticWorkerPoller {
 public:
  // `registry` and `channels` must outlive the poller.
  StaticWorkerPoller(WorkerRegistry* registry, WorkerChannels* channels);
  ~StaticWorkerPoller();  // Stop()
  StaticWorkerPoller(const StaticWorkerPoller&) = delete;
  StaticWorkerPoller& operator=(const StaticWorkerPoller&) = delete;

  // Polls every static worker once and waits (at most `timeout`) for the answers, so that the
  // router starts with a view of its workers; then polls every interval in the background.
  void Start(absl::Duration timeout);
  // Stops polling and waits for the calls in flight.
  void Stop();

 private:
  void PollRound();
  void Loop();

  WorkerRegistry* const registry_;
  WorkerChannels* const channels_;
  absl::Mutex mu_;
  absl::flat_hash_set<std::string> in_flight_ ABSL_GUARDED_BY(mu_);  // worker ids
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace baton::router

#endif  // BATON_ROUTER_STATIC_WORKER_POLLER_H_
