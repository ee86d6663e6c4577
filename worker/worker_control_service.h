// The WorkerControl gRPC service (proto/baton/v1/worker.proto): ChangeRole, answered by the
// worker's RoleSwitch. Like every worker service it sits behind the shared token when one is set.
//
// Thread-safety: thread-safe.
#ifndef BATON_WORKER_WORKER_CONTROL_SERVICE_H_
#define BATON_WORKER_WORKER_CONTROL_SERVICE_H_

#include "baton/v1/worker.grpc.pb.h"
#include "worker/role_switch.h"

namespace baton::worker {

class WorkerControlService final : public baton::v1::WorkerControl::CallbackService {
 public:
  explicit WorkerControlService(RoleSwitch* role_switch) : role_switch_(*role_switch) {}

  grpc::ServerUnaryReactor* ChangeRole(grpc::CallbackServerContext* context,
                                       const baton::v1::ChangeRoleRequest* request,
                                       baton::v1::ChangeRoleResponse* response) override;

 private:
  RoleSwitch& role_switch_;
};

}  // namespace baton::worker

#endif  // BATON_WORKER_WORKER_CONTROL_SERVICE_H_
