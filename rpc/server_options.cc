#include "rpc/server_options.h"

#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/health_check_service_interface.h"
#include "rpc/auth.h"
#include "rpc/reflection_v1.h"

namespace baton::rpc {
namespace {

// The receive window a server grants each stream (see StartServer).
constexpr int kStreamWindowBytes = 8 << 20;

// Whether host:port cannot be bound because something listens there: why a server's bind failed.
bool AddressInUse(const std::string& host, int port) {
  if (port == 0) return false;
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  if (getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found) != 0) return false;
  bool in_use = false;
  for (const addrinfo* a = found; a != nullptr && !in_use; a = a->ai_next) {
    const int fd = socket(a->ai_family, a->ai_socktype, a->ai_protocol);
    if (fd < 0) continue;
    const int yes = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));  // as gRPC binds
    in_use = bind(fd, a->ai_addr, a->ai_addrlen) != 0 && errno == EADDRINUSE;
    close(fd);
  }
  freeaddrinfo(found);
  return in_use;
}

}  // namespace

absl::StatusOr<StartedServer> StartServer(const ServerOptions& options,
                                          const std::vector<grpc::Service*>& services) {
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> credentials =
      MakeServerCredentials(options.tls, options.auth_token);
  if (!credentials.ok()) return credentials.status();
  grpc::ServerBuilder builder;
  StartedServer started;
  const std::string address = absl::StrCat(
      options.host.find(':') != std::string::npos ? absl::StrCat("[", options.host, "]")
                                                  : options.host,
      ":", options.port);
  builder.AddListeningPort(address, *credentials, &started.port);
  builder.SetMaxReceiveMessageSize(options.max_message_bytes);
  builder.SetMaxSendMessageSize(options.max_message_bytes);
  // gRPC sets SO_REUSEPORT by default: a second server on the same port would "listen" too and
  // silently take a share of the connections. Without it that bind fails.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  // Accept clients' keepalive pings (ClientOptions), also while no data flows.
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS,
                             static_cast<int>(kMinClientPingInterval.count()));
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PING_STRIKES, 0);
  // A fixed receive window per stream instead of gRPC's bandwidth-delay probing, whose pings
  // cost about an eighth of a KV push's throughput on loopback (bench handoff). 8 MiB in flight
  // keeps a 10 Gbit/s link full up to 6 ms of round trip; it is also what a peer can make the
  // server buffer per stream before the service reads.
  builder.AddChannelArgument(GRPC_ARG_HTTP2_BDP_PROBE, 0);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES, kStreamWindowBytes);
  AddReflectionV1(builder);
  for (grpc::Service* service : services) builder.RegisterService(service);
  started.server = builder.BuildAndStart();
  if (started.server == nullptr || started.port == 0) {
    return absl::UnavailableError(absl::StrCat(
        "cannot listen on ", address,
        AddressInUse(options.host, options.port) ? ": address in use" : ""));
  }
  return started;
}

absl::StatusOr<std::shared_ptr<grpc::Channel>> MakeChannel(const std::string& address,
                                                           const ClientOptions& options,
                                                           Connection connection) {
  std::shared_ptr<grpc::ChannelCredentials> credentials = grpc::InsecureChannelCredentials();
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(options.max_message_bytes);
  args.SetMaxSendMessageSize(options.max_message_bytes);
  // Reconnect quickly after a worker restarts.
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, static_cast<int>(options.keepalive_time.count()));
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, static_cast<int>(options.keepalive_timeout.count()));
  args.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);  // a call waiting for tokens sends none
  if (connection == Connection::kOwn) args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  if (options.tls.enabled()) {
    grpc::SslCredentialsOptions ssl;
    if (!options.tls.ca_file.empty()) {
      absl::StatusOr<std::string> ca = ReadTlsFile(options.tls.ca_file, "TLS CA");
      if (!ca.ok()) return ca.status();
      ssl.pem_root_certs = *ca;
    }
    if (!options.tls.cert_file.empty()) {
      absl::StatusOr<std::string> cert = ReadTlsFile(options.tls.cert_file, "TLS certificate");
      if (!cert.ok()) return cert.status();
      absl::StatusOr<std::string> key = ReadTlsFile(options.tls.key_file, "TLS key");
      if (!key.ok()) return key.status();
      ssl.pem_cert_chain = *cert;
      ssl.pem_private_key = *key;
    }
    credentials = grpc::SslCredentials(ssl);
    if (!options.tls_server_name.empty()) {
      args.SetSslTargetNameOverride(options.tls_server_name);
    }
  }
  return grpc::CreateCustomChannel(address, credentials, args);
}

void PrepareContext(grpc::ClientContext& context, const ClientOptions& options,
                    std::chrono::system_clock::time_point deadline) {
  context.set_deadline(deadline);
  if (!options.auth_token.empty()) {
    context.AddMetadata("authorization", absl::StrCat("Bearer ", options.auth_token));
  }
}

}  // namespace baton::rpc
