#include "worker/worker_control_service.h"

#include "rpc/status.h"

namespace baton::worker {

grpc::ServerUnaryReactor* WorkerControlService::ChangeRole(
    grpc::CallbackServerContext* context, const baton::v1::ChangeRoleRequest* request,
    baton::v1::ChangeRoleResponse* response) {
  absl::StatusOr<RoleChange> change =
      role_switch_.Change(request->role(), std::chrono::milliseconds(request->drain_timeout_ms()));
  if (!change.ok()) return rpc::FinishUnary(context, rpc::ToGrpcStatus(change.status()));
  response->set_previous(change->previous);
  response->set_role(change->role);
  return rpc::FinishUnary(context, grpc::Status::OK);
}

}  // namespace baton::worker
