#include "rpc/worker_status.h"

#include "rpc/status.h"

namespace baton::rpc {

grpc::ServerUnaryReactor* AnswerWorkerStatus(grpc::CallbackServerContext* context,
                                             baton::v1::WorkerRole role,
                                             const baton::v1::ModelIdentity& model,
                                             const std::function<baton::v1::WorkerLoad()>& load,
                                             baton::v1::StatusResponse* response) {
  response->set_role(role);
  *response->mutable_model() = model;
  *response->mutable_load() = load();
  return FinishUnary(context, grpc::Status::OK);
}

}  // namespace baton::rpc
