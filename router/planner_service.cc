#include "router/planner_service.h"

#include <cmath>

#include "base/log.h"
#include "metrics/metrics.h"

namespace baton::router {
namespace {

// Infinite pressure (a side without workers) is published as a large finite number.
double Finite(double v) { return std::isfinite(v) ? v : 1e9; }

void Publish(const PlannerDecision& d, const char* outcome) {
  metrics::Registry& r = metrics::Registry::Global();
  const char* recommended_help = "Workers the SLO planner recommends per role.";
  r.GetGauge("baton:planner_recommended_workers", recommended_help, {{"role", "prefill"}})
      .Set(d.recommended.prefill);
  r.GetGauge("baton:planner_recommended_workers", recommended_help, {{"role", "decode"}})
      .Set(d.recommended.decode);
  r.GetGauge("baton:planner_recommended_workers", recommended_help, {{"role", "both"}})
      .Set(d.recommended.both);
  const char* pressure_help = "Each side's predicted time over its SLO target (1: at the target).";
  r.GetGauge("baton:planner_pressure", pressure_help, {{"side", "prefill"}})
      .Set(Finite(d.pressure.prefill));
  r.GetGauge("baton:planner_pressure", pressure_help, {{"side", "decode"}})
      .Set(Finite(d.pressure.decode));
  if (d.move) {
    r.GetCounter("baton:planner_moves_total", "Role changes the SLO planner chose.",
                 {{"to", std::string(WorkerRoleName(d.move->to))}, {"outcome", outcome}})
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
  // The first look after one dwell: the workers of a cluster starting up register (and measure)
  // first, so that a side not registered yet is not taken for a side without capacity.
  thread_ = std::thread([this] {
    if (stop_.WaitForNotificationWithTimeout(options_.planner.dwell)) return;
    do {
      EvaluateOnce();
    } while (!stop_.WaitForNotificationWithTimeout(options_.interval));
  });
}

void PlannerService::Stop() {
  if (!stop_.HasBeenNotified()) stop_.Notify();
  if (thread_.joinable()) thread_.join();
}

PlannerDecision PlannerService::EvaluateOnce() {
  const PlannerDecision decision = planner_.Evaluate(registry_->Snapshot(), options_.clock->Now());
  const char* outcome = "recommended";
  if (decision.move && options_.role_changer != nullptr) {
    absl::StatusOr<v1::ChangeRoleResponse> made = options_.role_changer->Change(
        decision.move->worker_id, decision.move->to, options_.drain_timeout);
    outcome = made.ok() ? "made" : "failed";
    if (!made.ok()) BATON_LOG(WARNING) << "planner: move failed: " << made.status().message();
  }
  Publish(decision, outcome);
  if (decision.move) {
    BATON_LOG(INFO) << "planner: " << outcome << ": " << decision.reason << " (recommended "
                    << decision.recommended.prefill << " prefill, " << decision.recommended.decode
                    << " decode, " << decision.recommended.both << " both)";
    last_logged_.clear();
  } else if (Kind(decision.reason) != Kind(last_logged_)) {
    BATON_LOG(INFO) << "planner: holding: " << decision.reason;
    last_logged_ = decision.reason;
  }
  return decision;
}

}  // namespace baton::router
