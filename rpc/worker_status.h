// The Status RPC that every worker service (prefill, decode) answers the same way.
//
// Thread-safety: a pure function of its arguments; `load` is called once, on the calling thread.
#ifndef BATON_RPC_WORKER_STATUS_H_
#define BATON_RPC_WORKER_STATUS_H_

#include <functional>

#include "baton/v1/worker.pb.h"
#include "grpcpp/grpcpp.h"

namespace baton::rpc {

// Fills `response` with the worker's role, model and
// current load and ends the call.
grpc::ServerUnaryReactor* AnswerWorkerStatus(grpc::CallbackServerContext* context,
                                             baton::v1::WorkerRole role,
                                             const baton::v1::ModelIdentity& model,
                                             const std::function<baton::v1::WorkerLoad()>& load,
                                             baton::v1::StatusResponse* response);

}  // namespace baton::rpc

#endif  // BATON_RPC_WORKER_STATUS_H_
