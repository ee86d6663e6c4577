// Runs the capacity planner (capacity_planner.h) every interval over the registry's workers and
// publishes what it recommends: gauges baton:planner_recommended_workers{role="prefill|decode"}
// and baton:planner_pressure{side="prefill|decode"}, a counter
// baton:planner_moves_total{to="prefill|decode"}, and a log line for each recommended move (and
// whenever the reason for holding changes kind).
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
#include "router/worker_registry.h"

namespace baton::router {

struct PlannerServiceOptions {
  CapacityPlannerOptions planner;
  absl::Duration interval = absl::Seconds(5);
  const Clock* clock = &Clock::Real();  // must outlive the service
};

class PlannerService {
 public:
  // `registry` must outlive the service.
  PlannerService(WorkerRegistry* registry, PlannerServiceOptions options);
  ~PlannerService();  // Stop()
  PlannerService(const PlannerService&) = delete;
  PlannerService& operator=(const PlannerService&) = delete;

  // Evaluates every interval in the background.
  void Start();
  void Stop();

  // One evaluation, published; returned for tests.
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
