// The one mapping between absl::Status (inside baton) and grpc::Status (on the wire).
//
// The codes keep their meaning across the edge: RESOURCE_EXHAUSTED (KV or queue full),
// UNAVAILABLE (worker down, retryable), DEADLINE_EXCEEDED, INVALID_ARGUMENT (bad input, with what
// and where), FAILED_PRECONDITION (illegal state), UNAUTHENTICATED, CANCELLED, NOT_FOUND.
#ifndef BATON_RPC_STATUS_H_
#define BATON_RPC_STATUS_H_

#include "absl/status/status.h"
#include "grpcpp/grpcpp.h"

namespace baton::rpc {

grpc::Status ToGrpcStatus(const absl::Status& status);
absl::Status FromGrpcStatus(const grpc::Status& status);

// Ends a unary callback handler at once with `status` (its response already filled when OK).
grpc::ServerUnaryReactor* FinishUnary(grpc::CallbackServerContext* context,
                                      const grpc::Status& status);

}  // namespace baton::rpc

#endif  // BATON_RPC_STATUS_H_
