#include "router/role_changer.h"

#include <algorithm>
#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/log.h"
#include "baton/v1/worker.grpc.pb.h"
#include "metrics/metrics.h"
#include "rpc/status.h"

namespace baton::router {

absl::Status CheckSidesKept(const std::vector<WorkerSnapshot>& workers,
                            const std::string& worker_id, v1::WorkerRole from, v1::WorkerRole to) {
  auto kept = [&](bool (*serves)(v1::WorkerRole)) {
    if (!serves(from) || serves(to)) return true;  // the side is not dropped
    for (const WorkerSnapshot& w : workers) {
      if (w.id != worker_id && w.healthy && !w.draining && serves(w.role)) return true;
    }
    return false;
  };
  for (auto [side, serves] : {std::pair{"prefill", &ServesPrefill}, {"decode", &ServesDecode}}) {
    if (!kept(serves)) {
      return absl::FailedPreconditionError(absl::StrCat("worker ", worker_id,
                                                        " is the last healthy worker serving ",
                                                        side, "; it stays ", WorkerRoleName(from)));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<v1::ChangeRoleResponse> RoleChanger::Change(const std::string& worker_id,
                                                           v1::WorkerRole to,
                                                           absl::Duration drain_timeout) {
  if (!ServesPrefill(to) && !ServesDecode(to)) {
    return absl::InvalidArgumentError("a role change needs a role: prefill, decode or both");
  }
  absl::MutexLock lock(&mu_);
  const std::vector<WorkerSnapshot> workers = registry_.Snapshot();
  auto it = std::find_if(workers.begin(), workers.end(),
                         [&](const WorkerSnapshot& w) { return w.id == worker_id; });
  if (it == workers.end()) return absl::NotFoundError(absl::StrCat("no worker ", worker_id));
  const WorkerSnapshot& worker = *it;
  if (worker.is_static) {
    return absl::FailedPreconditionError(
        absl::StrCat("worker ", worker_id, " at ", worker.address,
                     " is listed statically: its role is the router's flag"));
  }
  if (absl::Status kept = CheckSidesKept(workers, worker_id, worker.role, to); !kept.ok()) {
    return kept;
  }
  absl::StatusOr<std::shared_ptr<grpc::Channel>> channel = channels_.Get(worker.address);
  if (!channel.ok()) return channel.status();
  std::unique_ptr<v1::WorkerControl::Stub> stub = v1::WorkerControl::NewStub(*channel);
  grpc::ClientContext context;
  rpc::PrepareContext(context, channels_.options(),
                      std::chrono::system_clock::now() + absl::ToChronoMilliseconds(call_timeout_));
  v1::ChangeRoleRequest request;
  request.set_role(to);
  request.set_drain_timeout_ms(absl::ToInt64Milliseconds(drain_timeout));
  v1::ChangeRoleResponse response;
  const grpc::Status status = stub->ChangeRole(&context, request, &response);
  if (!status.ok()) {
    return absl::Status(
        rpc::FromGrpcStatus(status).code(),
        absl::StrCat("worker ", worker_id, " at ", worker.address, " refused the change to ",
                     WorkerRoleName(to), ": ", status.error_message()));
  }
  if (absl::Status set = registry_.SetRole(worker_id, response.role()); !set.ok()) return set;
  if (response.previous() != response.role()) {
    metrics::Registry::Global()
        .GetCounter("baton:router_role_changes_total", "Worker role changes this router made.",
                    {{"from", std::string(WorkerRoleName(response.previous()))},
                     {"to", std::string(WorkerRoleName(response.role()))}})
        .Increment();
    BATON_LOG(INFO) << "worker " << worker_id << " at " << worker.address << " changed role "
                    << WorkerRoleName(response.previous()) << " -> "
                    << WorkerRoleName(response.role());
  }
  return response;
}

}  // namespace baton::router
