// Changes a registered worker's role in place (worker/role_switch.h), for the SLO planner and the
// Router.ChangeWorkerRole RPC: the one place that keeps the rule that a change never leaves a
// side (prefill, decode) without a healthy, undrained worker. Asks the worker
// (WorkerControl.ChangeRole: it switches at once and drains the dropped side itself), then places
// by its new role (WorkerRegistry::SetRole; its heartbeats carry the role from then on, to every
// router). Metric baton:router_role_changes_total{from,to}; each change logged.
//
// One change at a time per router (a second waits for the first's call), so that two changes
// cannot both pass the last-worker check; routers that are replicas do not coordinate theirs.
//
// Thread-safety: thread-safe; Change() blocks for one worker call, bounded by call_timeout.
#ifndef BATON_ROUTER_ROLE_CHANGER_H_
#define BATON_ROUTER_ROLE_CHANGER_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "baton/v1/worker.pb.h"
#include "router/worker_channels.h"
#include "router/worker_registry.h"

namespace baton::router {

class RoleChanger {
 public:
  // `registry` and `channels` must outlive the changer.
  RoleChanger(WorkerRegistry* registry, WorkerChannels* channels,
              absl::Duration call_timeout = absl::Seconds(5))
      : registry_(*registry), channels_(*channels), call_timeout_(call_timeout) {}

  // Serves `to` on the worker from now on; the worker's answer (its previous role and new one).
  // NOT_FOUND: no such worker; FAILED_PRECONDITION: it is static, or no other healthy worker
  // would serve a side it drops; INVALID_ARGUMENT: `to` is no role; the worker's error (named)
  // otherwise. drain_timeout: how long its decode sequences may run on (zero: the worker's
  // default).
  absl::StatusOr<v1::ChangeRoleResponse> Change(const std::string& worker_id, v1::WorkerRole to,
                                                absl::Duration drain_timeout);

 private:
  WorkerRegistry& registry_;
  WorkerChannels& channels_;
  const absl::Duration call_timeout_;
  absl::Mutex mu_;  // one change at a time
};

// OK when `workers` keep a healthy, undrained worker on every side `from` serves and `to` does
// not, counting every worker but `worker_id`; FAILED_PRECONDITION naming the side otherwise.
absl::Status CheckSidesKept(const std::vector<WorkerSnapshot>& workers,
                            const std::string& worker_id, v1::WorkerRole from, v1::WorkerRole to);

}  // namespace baton::router

#endif  // BATON_ROUTER_ROLE_CHANGER_H_
