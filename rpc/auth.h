// The shared-token check every baton service runs first in every handler.
//
// Thread-safety: pure function.
#ifndef BATON_RPC_AUTH_H_
#define BATON_RPC_AUTH_H_

#include <string>

#include "grpcpp/grpcpp.h"

namespace baton::rpc {

// OK when `token` is empty (no token configured) or the call's metadata carries
// "authorization: Bearer <token>"; UNAUTHENTICATED otherwise. Constant-time comparison.
grpc::Status CheckAuth(const grpc::ServerContextBase& context, const std::string& token);

// True when `presented` equals `expected`, in time independent of where they differ.
bool TokensEqual(const std::string& presented, const std::string& expected);

}  // namespace baton::rpc

#endif  // BATON_RPC_AUTH_H_
