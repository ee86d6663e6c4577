// What every worker service (prefill, decode) and the router say the same way about a worker's
// role: which sides a role serves, its name, the refusal of new work of a side the worker no
// longer serves (its role changed in place: worker/role_switch.h), and the Status RPC.
//
// Thread-safety: pure functions of their arguments; `load` is called once, on the calling thread.
#ifndef BATON_RPC_WORKER_STATUS_H_
#define BATON_RPC_WORKER_STATUS_H_

#include <functional>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "baton/v1/worker.pb.h"
#include "grpcpp/grpcpp.h"

namespace baton::rpc {

// Whether a worker of `role` serves the prefill / decode side.
bool ServesPrefill(baton::v1::WorkerRole role);
bool ServesDecode(baton::v1::WorkerRole role);
// "prefill", "decode", "both", "unspecified".
absl::string_view WorkerRoleName(baton::v1::WorkerRole role);

// OK when a worker of `role` takes new `side` work ("prefill" or "decode"); otherwise ABORTED
// naming the role it serves now, so that the router places the request again, elsewhere.
absl::Status CheckServes(baton::v1::WorkerRole role, absl::string_view side);

// Fills `response` with the worker's role, model and
// current load and ends the call.
grpc::ServerUnaryReactor* AnswerWorkerStatus(grpc::CallbackServerContext* context,
                                             baton::v1::WorkerRole role,
                                             const baton::v1::ModelIdentity& model,
                                             const std::function<baton::v1::WorkerLoad()>& load,
                                             baton::v1::StatusResponse* response);

}  // namespace baton::rpc

#endif  // BATON_RPC_WORKER_STATUS_H_
