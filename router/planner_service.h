// Runs the capacity planner (capacity_planner.h) every interval over the registry's workers,
// makes each move it chooses when given a RoleChanger (--planner slo: the worker changes role in
// place) and publishes what it decides: gauges
// baton:planner_recommended_workers{role="prefill|decode|both"} (for an autoscaler, with
// --planner recommend) and baton:planner_pressure{side="prefill|decode"}, a counter
// baton:planner_moves_total{to,outcome="made|failed|recommended"}, and a log line for each move
// (and whenever the reason for holding changes kind).
//
// Thread-safety: Start() and Stop() once each, from one thread; EvaluateOnce() from one thread at
// a time.
#ifndef BATON_ROUTER_PLANNER_SERVICE_H_
#define BATON_ROUTER_PLANNER_SERVICE_H_

#include <string>
#include <thread>

#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "base/clock.h"
#include "router/capacity_planner.h"
#include "router/role_changer.h"
#include "router/worker_registry.h"

namespace baton::router {

struct PlannerServiceOptions {
  CapacityPlannerOptions planner;
  absl::Duration interval = absl::Seconds(5);
  // Makes the moves (null: recommends only); must outlive the service.
  RoleChanger* role_changer = nullptr;
  // How long a worker leaving the decode role lets its sequences run before they migrate.
  absl::Duration drain_timeout = absl::Seconds(10);
  const Clock* clock = &Clock::Real();  // must outlive the service
};

class PlannerService {
 public:
  // `registry` must outlive the service.
  PlannerService(WorkerRegistry* registry, PlannerServiceOptions options);
  ~PlannerService();  // Stop()
  PlannerService(const PlannerService&) = delete;
  PlannerService& operator=(const PlannerService&) = delete;

  // Evaluates every interval in the background, the first time one dwell after Start().
  void Start();
  void Stop();

  // One evaluation, its move made (when acting) and published; returned for tests.
  PlannerDecision EvaluateOnce();

 private:
  WorkerRegistry* const registry_;
  const PlannerServiceOptions options_;
  CapacityPlanner planner_;
  std::string last_logged_;  // the reason last logged while holding
  absl::Notification stop_;
  std::thread thread_;
};

}  // namespace baton::router

#endif  // BATON_ROUTER_PLANNER_SERVICE_H_
