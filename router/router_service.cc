#include "router/router_service.h"

#include "absl/time/clock.h"
#include "rpc/status.h"

namespace baton::router {
grpc::ServerWriteReactor<v1::GenerateResponse>* RouterService::Generate(
    grpc::CallbackServerContext* context, const v1::GenerateRequest* request) {
  return new GenerateReactor(context, *request, env_);
}

grpc::ServerUnaryReactor* RouterService::ListModels(grpc::CallbackServerContext* context,
                                                    const v1::ListModelsRequest* request,
                                                    v1::ListModelsResponse* response) {
  const ServedModel& model = *env_.driver.model;
  v1::ModelInfo* info = response->add_models();
  info->set_id(model.id());
  info->set_n_ctx(model.n_ctx());
  info->set_fingerprint(model.fingerprint());
  return rpc::FinishUnary(context, grpc::Status::OK);
}

grpc::ServerUnaryReactor* RouterService::ClusterStatus(grpc::CallbackServerContext* context,
                                                       const v1::ClusterStatusRequest* request,
                                                       v1::ClusterStatusResponse* response) {
  const absl::Time now = absl::Now();
  for (const WorkerSnapshot& w : env_.driver.registry->Snapshot()) {
    v1::WorkerStatus* status = response->add_workers();
    status->set_worker_id(w.id);
    status->set_role(w.role);
    status->set_address(w.address);
    *status->mutable_load() = w.load;
    status->set_cached_blocks(w.n_cached_blocks);
    status->set_healthy(w.healthy);
    status->set_draining(w.draining);
    status->set_seconds_since_heartbeat(
        w.last_seen == absl::InfinitePast() ? -1.0 : absl::ToDoubleSeconds(now - w.last_seen));
  }
  response->set_queued_requests(env_.driver.table->queued());
  response->set_active_requests(env_.driver.table->active());
  return rpc::FinishUnary(context, grpc::Status::OK);
}

grpc::ServerUnaryReactor* RouterService::RegisterWorker(grpc::CallbackServerContext* context,
                                                        const v1::RegisterWorkerRequest* request,
                                                        v1::RegisterWorkerResponse* response) {
  WorkerRegistry& registry = *env_.driver.registry;
  absl::StatusOr<std::string> id =
      registry.Register(request->role(), request->address(), request->model(), request->load());
  if (!id.ok()) return rpc::FinishUnary(context, rpc::ToGrpcStatus(id.status()));
  response->set_worker_id(*id);
  response->set_heartbeat_interval_ms(absl::ToInt64Milliseconds(registry.heartbeat_interval()));
  return rpc::FinishUnary(context, grpc::Status::OK);
}

grpc::ServerUnaryReactor* RouterService::Heartbeat(grpc::CallbackServerContext* context,
                                                   const v1::HeartbeatRequest* request,
                                                   v1::HeartbeatResponse* response) {
  response->set_known(
      env_.driver.registry->Heartbeat(request->worker_id(), request->load(), request->role()));
  return rpc::FinishUnary(context, grpc::Status::OK);
}

grpc::ServerUnaryReactor* RouterService::ChangeWorkerRole(
    grpc::CallbackServerContext* context, const v1::ChangeWorkerRoleRequest* request,
    v1::ChangeWorkerRoleResponse* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  const bool submitted = env_.pool->Submit([this, reactor, request, response] {
    absl::StatusOr<v1::ChangeRoleResponse> change =
        role_changer_.Change(request->worker_id(), request->role(),
                             absl::Milliseconds(request->drain_timeout_ms()));
    if (change.ok()) {
      response->set_previous(change->previous());
      response->set_role(change->role());
    }
    reactor->Finish(rpc::ToGrpcStatus(change.status()));
  });
  if (!submitted) {
    reactor->Finish(grpc::Status(grpc::StatusCode::UNAVAILABLE, "the router is shutting down"));
  }
  return reactor;
}

}  // namespace baton::router
