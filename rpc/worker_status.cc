#include "rpc/worker_status.h"

#include "absl/strings/str_cat.h"
#include "rpc/status.h"

namespace baton::rpc {

bool ServesPrefill(baton::v1::WorkerRole role) {
  return role == baton::v1::WORKER_ROLE_PREFILL || role == baton::v1::WORKER_ROLE_BOTH;
}

bool ServesDecode(baton::v1::WorkerRole role) {
  return role == baton::v1::WORKER_ROLE_DECODE || role == baton::v1::WORKER_ROLE_BOTH;
}

absl::string_view WorkerRoleName(baton::v1::WorkerRole role) {
  switch (role) {
    case baton::v1::WORKER_ROLE_PREFILL:
      return "prefill";
    case baton::v1::WORKER_ROLE_DECODE:
      return "decode";
    case baton::v1::WORKER_ROLE_BOTH:
      return "both";
    default:
      return "unspecified";
  }
}

absl::Status CheckServes(baton::v1::WorkerRole role, absl::string_view side) {
  const bool serves = side == "prefill" ? ServesPrefill(role) : ServesDecode(role);
  if (serves) return absl::OkStatus();
  return absl::AbortedError(absl::StrCat("this worker takes no new ", side,
                                         " work: its role is ", WorkerRoleName(role), " now"));
}

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
