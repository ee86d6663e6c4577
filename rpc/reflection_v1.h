// gRPC server reflection, version v1 (grpc.reflection.v1.ServerReflection): gRPC 1.51's plugin
// serves only grpc.reflection.v1alpha, and current clients (grpcurl, grpcui, Postman) ask for v1
// first. Answers list_services, file_by_filename, file_containing_symbol,
// file_containing_extension and all_extension_numbers_of_type from protobuf's generated
// descriptor pool, each file with its transitive dependencies (as gRPC's v1alpha does); an unknown
// name is an error_response with NOT_FOUND. A stream answers at most kMaxReflectionRequests
// requests, then ends with RESOURCE_EXHAUSTED; each message is size-limited like any other.
//
//   grpc::ServerBuilder builder;
//   AddReflectionV1(builder);  // before BuildAndStart()
//
// Thread-safety: the service is safe for concurrent calls; each call's state is its own.
#ifndef BATON_RPC_REFLECTION_V1_H_
#define BATON_RPC_REFLECTION_V1_H_

#include "grpcpp/server_builder.h"

namespace baton::rpc {

inline constexpr int kMaxReflectionRequests = 1024;

// Makes the server `builder` builds serve grpc.reflection.v1.ServerReflection. list_services
// names every service that server registers: the builder's, grpc.health.v1.Health and the
// reflection services.
void AddReflectionV1(grpc::ServerBuilder& builder);

}  // namespace baton::rpc

#endif  // BATON_RPC_REFLECTION_V1_H_
