#include "cli/serve_flags.h"

#include <csignal>
#include <fstream>
#include <iterator>

#include "absl/strings/str_cat.h"
#include "base/log.h"

namespace baton::cli {

std::vector<FlagSpec> ServeFlagSpecs() {
  return {
      {"host", "HOST", "address to listen on (default 127.0.0.1)"},
      {"port", "PORT", "port to listen on (default 0: any free port)"},
      {"token", "TOKEN", "shared token required of callers and sent to peers"},
      {"token-file", "PATH", "read the shared token from a file"},
      {"tls-cert", "PEM", "serve TLS with this certificate (with --tls-key)"},
      {"tls-key", "PEM", "TLS private key"},
      {"tls-ca", "PEM", "CA to verify peers' TLS certificates (enables TLS to peers)"},
      {"max-message-bytes", "N", "largest gRPC message accepted or sent (default 64 MiB)"},
      {"log-level", "LEVEL", "debug | info | warning | error (default info)"},
  };
}

absl::Status ParseServeFlags(const Flags& flags, rpc::ServerOptions& server,
                             rpc::ClientOptions& peers) {
  server.host = flags.GetOr("host", "127.0.0.1");
  absl::StatusOr<int64_t> port = flags.GetInt("port", 0, 0, 65535);
  if (!port.ok()) return port.status();
  server.port = static_cast<int>(*port);
  absl::StatusOr<int64_t> max_bytes = flags.GetInt("max-message-bytes", 64 << 20, 1024, 1 << 30);
  if (!max_bytes.ok()) return max_bytes.status();
  server.max_message_bytes = peers.max_message_bytes = static_cast<int>(*max_bytes);
  std::string token = flags.GetOr("token", "");
  if (auto file = flags.Get("token-file")) {
    absl::StatusOr<std::string> read = ReadTokenFile(*file);
    if (!read.ok()) return read.status();
    token = *std::move(read);
  }
  server.auth_token = peers.auth_token = token;
  server.tls.cert_file = flags.GetOr("tls-cert", "");
  server.tls.key_file = flags.GetOr("tls-key", "");
  if (server.tls.cert_file.empty() != server.tls.key_file.empty()) {
    return absl::InvalidArgumentError("--tls-cert and --tls-key go together");
  }
  peers.tls.ca_file = flags.GetOr("tls-ca", "");
  absl::StatusOr<LogLevel> level = ParseLogLevel(flags.GetOr("log-level", "info"));
  if (!level.ok()) return level.status();
  SetLogLevel(*level);
  return absl::OkStatus();
}

absl::StatusOr<std::string> ReadTokenFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read the token file '", path, "'"));
  std::string token(std::istreambuf_iterator<char>(in), {});
  while (!token.empty() && (token.back() == '\n' || token.back() == '\r')) token.pop_back();
  if (token.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("the token file '", path, "' is empty"));
  }
  return token;
}

void BlockShutdownSignals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
}

int WaitForShutdownSignal() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  int signal = 0;
  sigwait(&set, &signal);
  return signal;
}

}  // namespace baton::cli
