// Who may call a baton gRPC server: the shared-token check, done once per call by gRPC itself
// (an auth metadata processor on the server's credentials) before any handler runs, so that no
// service handler repeats it and an unauthenticated call never reaches one.
//
// With a token configured, a call must carry the metadata "authorization: Bearer TOKEN" or it
// fails with UNAUTHENTICATED; the standard health (grpc.health.v1) and reflection services stay
// open to probes. Tokens are compared in constant time.
//
// Thread-safety: pure functions; the credentials may be shared by servers.
#ifndef BATON_RPC_AUTH_H_
#define BATON_RPC_AUTH_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "grpcpp/grpcpp.h"

namespace baton::rpc {

struct TlsFiles {
  std::string cert_file;  // PEM certificate chain (server), or client certificate for mTLS
  std::string key_file;   // PEM private key
  std::string ca_file;    // PEM roots to verify the peer (client side; server side: mTLS)
  bool enabled() const { return !cert_file.empty() || !ca_file.empty(); }
};

// Server credentials: TLS when `tls` is enabled (cert and key required; with a CA, clients must
// present a certificate it signed), plaintext otherwise; the token check when `auth_token` is not
// empty. INVALID_ARGUMENT / NOT_FOUND naming the file when a TLS file is missing or unreadable.
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(
    const TlsFiles& tls, const std::string& auth_token);

// The contents of a TLS file (`what`: "TLS certificate", "TLS key", "TLS CA"); NOT_FOUND naming
// it and the path when it cannot be read.
absl::StatusOr<std::string> ReadTlsFile(const std::string& path, const char* what);

// Whether a call to `method` (its full path, "/package.Service/Method") is checked at all: every
// method but the health and reflection services'.
bool MethodNeedsToken(absl::string_view method);

// True when `presented` equals `expected`, in time independent of where they differ.
bool TokensEqual(absl::string_view presented, absl::string_view expected);

}  // namespace baton::rpc

#endif  // BATON_RPC_AUTH_H_
