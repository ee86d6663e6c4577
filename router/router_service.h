// The router's gRPC API (baton.v1.Router, callback API): Generate streams a request's text
// (GenerateReactor), ListModels names the one served model, ClusterStatus shows the workers and
// the queue, RegisterWorker and Heartbeat keep the WorkerRegistry, ChangeWorkerRole changes a
// worker's role in place (RoleChanger). The shared token is checked before any call gets here
// (rpc/auth.h). No handler blocks: Generate's work and a role change's worker call run on the
// request pool, the others only take short locks.
//
// Thread-safety: thread-safe (gRPC calls the handlers from its threads).
#ifndef BATON_ROUTER_ROUTER_SERVICE_H_
#define BATON_ROUTER_ROUTER_SERVICE_H_

#include "baton/v1/router.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "router/generate_reactor.h"
#include "router/role_changer.h"

namespace baton::router {

class RouterService final : public v1::Router::CallbackService {
 public:
  // `env` (and all it points to) must outlive the service.
  RouterService(const GenerateEnv* env, RoleChanger* role_changer)
      : env_(*env), role_changer_(*role_changer) {}

  grpc::ServerWriteReactor<v1::GenerateResponse>* Generate(
      grpc::CallbackServerContext* context, const v1::GenerateRequest* request) override;
  grpc::ServerUnaryReactor* ListModels(grpc::CallbackServerContext* context,
                                       const v1::ListModelsRequest* request,
                                       v1::ListModelsResponse* response) override;
  grpc::ServerUnaryReactor* ClusterStatus(grpc::CallbackServerContext* context,
                                          const v1::ClusterStatusRequest* request,
                                          v1::ClusterStatusResponse* response) override;
  grpc::ServerUnaryReactor* RegisterWorker(grpc::CallbackServerContext* context,
                                           const v1::RegisterWorkerRequest* request,
                                           v1::RegisterWorkerResponse* response) override;
  grpc::ServerUnaryReactor* Heartbeat(grpc::CallbackServerContext* context,
                                      const v1::HeartbeatRequest* request,
                                      v1::HeartbeatResponse* response) override;
  grpc::ServerUnaryReactor* ChangeWorkerRole(grpc::CallbackServerContext* context,
                                             const v1::ChangeWorkerRoleRequest* request,
                                             v1::ChangeWorkerRoleResponse* response) override;

 private:
  const GenerateEnv& env_;
  RoleChanger& role_changer_;
};

}  // namespace baton::router

#endif  // BATON_ROUTER_ROUTER_SERVICE_H_
