#include "worker/role_switch.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "base/log.h"
#include "metrics/metrics.h"
#include "rpc/worker_status.h"

namespace baton::worker {
namespace {

constexpr baton::v1::WorkerRole kRoles[] = {
    baton::v1::WORKER_ROLE_PREFILL, baton::v1::WORKER_ROLE_DECODE, baton::v1::WORKER_ROLE_BOTH};

void SetDraining(bool draining) {
  metrics::Registry::Global()
      .GetGauge("baton:role_change_draining",
                "1 while the worker drains the side its last role change dropped.")
      .Set(draining ? 1 : 0);
}

}  // namespace

RoleSwitch::RoleSwitch(baton::v1::WorkerRole initial, RoleSwitchParts parts)
    : parts_(std::move(parts)), role_(initial) {
  PublishRole();
  SetDraining(false);
}

RoleSwitch::~RoleSwitch() {
  stop_.Notify();
  absl::MutexLock lock(&mu_);
  if (drain_.joinable()) drain_.join();
}

void RoleSwitch::PublishRole() const {
  for (baton::v1::WorkerRole role : kRoles) {
    metrics::Registry::Global()
        .GetGauge("baton:worker_role", "1 for the role this worker serves now, 0 for the others.",
                  {{"role", std::string(rpc::WorkerRoleName(role))}})
        .Set(role == role_.load() ? 1 : 0);
  }
}

absl::StatusOr<RoleChange> RoleSwitch::Change(baton::v1::WorkerRole to,
                                              std::chrono::milliseconds drain_timeout) {
  if (!rpc::ServesPrefill(to) && !rpc::ServesDecode(to)) {
    return absl::InvalidArgumentError("a role change needs a role: prefill, decode or both");
  }
  absl::MutexLock lock(&mu_);
  const baton::v1::WorkerRole from = role_.load();
  if (draining_.load()) {
    return absl::FailedPreconditionError(absl::StrCat("this worker still drains its change to ",
                                                      rpc::WorkerRoleName(from),
                                                      "; ask again once it is done"));
  }
  if (from == to) return RoleChange{.previous = from, .role = to};
  if (drain_.joinable()) drain_.join();  // the last drain has ended
  if (drain_timeout <= std::chrono::milliseconds(0)) drain_timeout = kDefaultDrainTimeout;
  role_ = to;
  draining_ = true;
  PublishRole();
  SetDraining(true);
  metrics::Registry::Global()
      .GetCounter("baton:role_changes_total", "Role changes this worker made in place.",
                  {{"from", std::string(rpc::WorkerRoleName(from))},
                   {"to", std::string(rpc::WorkerRoleName(to))}})
      .Increment();
  BATON_LOG(INFO) << "worker " << parts_.address() << ": role " << rpc::WorkerRoleName(from)
                  << " -> " << rpc::WorkerRoleName(to) << "; draining the dropped side (bound "
                  << drain_timeout.count() << " ms)";
  drain_ = std::thread(&RoleSwitch::Drain, this, from, to, drain_timeout);
  return RoleChange{.previous = from, .role = to};
}

void RoleSwitch::Drain(baton::v1::WorkerRole from, baton::v1::WorkerRole to,
                       std::chrono::milliseconds drain_timeout) {
  const bool prefill_dropped = rpc::ServesPrefill(from) && !rpc::ServesPrefill(to);
  const bool decode_dropped = rpc::ServesDecode(from) && !rpc::ServesDecode(to);
  auto held = [&] {
    return (prefill_dropped ? parts_.prefill_held() : 0) +
           (decode_dropped ? parts_.decode_held() : 0);
  };
  const auto start = std::chrono::steady_clock::now();
  const auto deadline = start + drain_timeout;
  const auto give_up = deadline + kDrainGrace;
  const absl::Status moved = absl::AbortedError(absl::StrCat(
      "worker ", parts_.address(), " left the decode role; the sequence moves to another worker"));
  int64_t held_at_deadline = -1;
  int64_t left = held();
  while (left > 0 && !stop_.HasBeenNotified()) {
    const auto now = std::chrono::steady_clock::now();
    if (now >= give_up) break;
    if (decode_dropped && now >= deadline) {
      if (held_at_deadline < 0) held_at_deadline = left;
      parts_.end_decode(moved);  // again each round: a reservation may admit one later
    }
    stop_.WaitForNotificationWithTimeout(absl::Milliseconds(10));
    left = held();
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (left > 0) {
    BATON_LOG(WARNING) << "worker " << parts_.address() << ": role change to "
                       << rpc::WorkerRoleName(to) << " stopped waiting after " << seconds
                       << " s with " << left << " still held by the dropped side";
  } else {
    BATON_LOG(INFO) << "worker " << parts_.address() << ": now " << rpc::WorkerRoleName(to)
                    << ", drained in " << seconds << " s"
                    << (held_at_deadline > 0
                            ? absl::StrCat("; ", held_at_deadline,
                                           " decode sequences or reservations held past the "
                                           "bound were ended to move elsewhere")
                            : "");
  }
  SetDraining(false);
  draining_ = false;
}

}  // namespace baton::worker
