#include "router/planner_service.h"

#include <cmath>

#include "base/log.h"
#include "metrics/metrics.h"

namespace baton::router {
namespace {

// Infinite pressure (a side without workers) is published as a large finite number.
double Finite(double v) { return std::isfinite(v) ? v : 1e9; }

void Publish(const PlannerDecision& d) {
  metrics::Registry& r = metrics::Registry::Global();
  const char* recommended_help = "Dedicated workers the SLO planner recommends per role.";
  r.GetGauge("baton:planner_recommended_workers", recommended_help, {{"role", "prefill"}})
      .Set(d.prefill_workers);
  r.GetGauge("baton:planner_recommended_workers", recommended_help, {{"role", "decode"}})
      .Set(d.decode_workers);
  const char* pressure_help = "Each side's predicted time over its SLO target (1: at the target).";
  r.GetGauge("baton:planner_pressure", pressure_help, {{"side", "prefill"}})
      .Set(Finite(d.pressure.prefill));
  r.GetGauge("baton:planner_pressure", pressure_help, {{"side", "decode"}})
      .Set(Finite(d.pressure.decode));
  if (d.move_to != v1::WORKER_ROLE_UNSPECIFIED) {
    r.GetCounter("baton:planner_moves_total", "Worker moves the SLO planner recommended.",
                 {{"to", std::string(WorkerRoleName(d.move_to))}})
        .Increment();
  }
}

// The reason without its figures: what kind of holding it is.
std::string Kind(const std::string& reason) {
  return reason.substr(0, reason.find_first_of("0123456789"));
}

}  // namespace

PlannerService::PlannerService(WorkerRegistry* registry, PlannerServiceOptions options)
    : registry_(registry), options_(options), planner_(options.planner) {}

PlannerService::~PlannerService() { Stop(); }

void PlannerService::Start() {
  thread_ = std::thread([this] {
    while (!stop_.WaitForNotificationWithTimeout(options_.interval)) EvaluateOnce();
  });
}

void PlannerService::Stop() {
  if (!stop_.HasBeenNotified()) stop_.Notify();
  if (thread_.joinable()) thread_.join();
}

PlannerDecision PlannerService::EvaluateOnce() {
  const PlannerDecision decision = planner_.Evaluate(registry_->Snapshot(), options_.clock->Now());
  Publish(decision);
  if (decision.move_to != v1::WORKER_ROLE_UNSPECIFIED) {
    BATON_LOG(INFO) << "planner: recommend " << decision.prefill_workers << " prefill and "
                    << decision.decode_workers << " decode workers: " << decision.reason;
    last_logged_.clear();
  } else if (Kind(decision.reason) != Kind(last_logged_)) {
    BATON_LOG(INFO) << "planner: holding: " << decision.reason;
    last_logged_ = decision.reason;
  }
  return decision;
}

}  // namespace baton::router
