// The router's view of every request it is serving: one id, one state (v1::RequestState, in
// chronological order: queued, prefilling, kv-sending, kv-received, decoding, finished, failed),
// and the bound on the router's queue.
//
// SetState() is the one place where a request's state changes. States only move forward (but a
// request that migrates to another worker pair starts over, Restart()); a
// request enters the table with REQUEST_STATE_UNSPECIFIED ("received") and leaves it when it
// reaches FINISHED or FAILED. A request is "queued" while it waits for decode capacity or for a
// request thread; at most `max_queued` may wait, past that entering QUEUED fails with
// RESOURCE_EXHAUSTED.
//
// Thread-safety: thread-safe.
#ifndef BATON_ROUTER_REQUEST_TABLE_H_
#define BATON_ROUTER_REQUEST_TABLE_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "baton/v1/common.pb.h"

namespace baton::router {

class RequestTable {
 public:
  explicit RequestTable(int max_queued) : max_queued_(max_queued) {}
  RequestTable(const RequestTable&) = delete;
  RequestTable& operator=(const RequestTable&) = delete;

  // ALREADY_EXISTS when a request with this id is in flight.
  absl::Status Add(const std::string& id);

  // Moves the request to `state` (later than its current one, or QUEUED again while queued).
  // RESOURCE_EXHAUSTED "router queue full" when entering QUEUED with max_queued requests already
  // queued; the state is then unchanged. FINISHED and FAILED remove the request. Unknown ids are
  // ignored.
  absl::Status SetState(const std::string& id, v1::RequestState state);
  // The request moves to another worker pair (migration): back to "received", from where its
  // next attempt moves forward again. Unknown ids are ignored.
  void Restart(const std::string& id);

  // The request's state; nullopt once it finished or failed.
  std::optional<v1::RequestState> State(const std::string& id);

  int queued();
  // In the table and not queued.
  int active();
  int max_queued() const { return max_queued_; }
  int64_t finished_total();
  int64_t failed_total();

 private:
  const int max_queued_;
  absl::Mutex mu_;
  absl::flat_hash_map<std::string, v1::RequestState> states_ ABSL_GUARDED_BY(mu_);
  int queued_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t finished_total_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t failed_total_ ABSL_GUARDED_BY(mu_) = 0;
};

// "queued", "prefilling", ... ("received" for UNSPECIFIED).
const char* RequestStateName(v1::RequestState state);

}  // namespace baton::router

#endif  // BATON_ROUTER_REQUEST_TABLE_H_
