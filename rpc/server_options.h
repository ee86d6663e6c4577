// How a baton gRPC server listens and whom it lets in; shared by the router and the workers.
//
// Secure by default: 127.0.0.1 unless told otherwise; every message size-limited; an optional
// shared token (metadata "authorization: Bearer TOKEN") checked on every call except the standard
// health and reflection services; optional TLS.
//
// Thread-safety: plain value types and pure functions.
#ifndef BATON_RPC_SERVER_OPTIONS_H_
#define BATON_RPC_SERVER_OPTIONS_H_

#include <cstdint>
#include <memory>
#include <chrono>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "grpcpp/grpcpp.h"
#include "rpc/auth.h"

namespace baton::rpc {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 0;                               // 0: the OS picks one (see StartedServer::port)
  std::string auth_token;                     // empty: no token required
  TlsFiles tls;                               // cert_file + key_file: serve TLS
  int max_message_bytes = 64 << 20;           // receive and send limit per message
};

struct ClientOptions {
  std::string auth_token;                     // sent on every call when non-empty
  TlsFiles tls;                               // ca_file (and optionally cert/key): use TLS
  std::string tls_server_name;                // override the name checked in the server's cert
  int max_message_bytes = 64 << 20;
  // HTTP/2 keepalive: a ping every keepalive_time while calls are open; a peer that does not
  // answer within keepalive_timeout (a frozen or vanished process whose socket stays open) fails
  // every call on the channel with UNAVAILABLE instead of leaving it waiting for its deadline.
  std::chrono::milliseconds keepalive_time{5000};
  std::chrono::milliseconds keepalive_timeout{5000};
};

// The shortest ping interval a baton server accepts from a client (below ClientOptions'
// keepalive_time, so that baton clients are never told "too many pings").
inline constexpr std::chrono::milliseconds kMinClientPingInterval{1000};

// A built and started server and the port it actually listens on.
struct StartedServer {
  std::unique_ptr<grpc::Server> server;
  int port = 0;
};

// Registers `services` (plus grpc.health.v1 and server reflection, v1 and v1alpha), applies the
// security options and starts listening. The token is checked by gRPC before any handler runs
// (rpc/auth.h): services do not check it. UNAVAILABLE with the address when the port cannot be
// bound, saying "address in use" when something listens there already (no SO_REUSEPORT: a second
// server on a port in use fails instead of sharing its connections).
absl::StatusOr<StartedServer> StartServer(const ServerOptions& options,
                                          const std::vector<grpc::Service*>& services);

// Whether a channel shares its connection with the process's other channels to the same address
// and options (gRPC's default), or opens one of its own.
enum class Connection { kShared, kOwn };

// A channel to `address` (host:port) with the client options applied.
absl::StatusOr<std::shared_ptr<grpc::Channel>> MakeChannel(
    const std::string& address, const ClientOptions& options,
    Connection connection = Connection::kShared);

// Adds the auth token (if any) to a client context and sets its deadline. Every client call in
// baton goes through this: no call without a deadline.
void PrepareContext(grpc::ClientContext& context, const ClientOptions& options,
                    std::chrono::system_clock::time_point deadline);

}  // namespace baton::rpc

#endif  // BATON_RPC_SERVER_OPTIONS_H_
