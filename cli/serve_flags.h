// Flags shared by the serving subcommands (router, prefill, decode, worker): where to listen and
// how to secure it, and the process's shutdown signal handling.
#ifndef BATON_CLI_SERVE_FLAGS_H_
#define BATON_CLI_SERVE_FLAGS_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "cli/flags.h"
#include "rpc/server_options.h"

namespace baton::cli {

// --host --port --token --token-file --tls-cert --tls-key --tls-ca --max-message-bytes
std::vector<FlagSpec> ServeFlagSpecs();

// Fills the server and peer (client) options from those flags and sets the process's log level
// (--log-level, base/log.h). The token is shared: the process requires it of its callers and
// presents it to its peers.
absl::Status ParseServeFlags(const Flags& flags, rpc::ServerOptions& server,
                             rpc::ClientOptions& peers);

// The shared token in the file at `path`, trailing newlines dropped. NOT_FOUND when it cannot be
// read, INVALID_ARGUMENT when it is empty.
absl::StatusOr<std::string> ReadTokenFile(const std::string& path);

// Blocks SIGINT and SIGTERM in the calling thread (call before starting any thread, so every
// thread inherits the mask), then later WaitForShutdownSignal() returns the signal received.
void BlockShutdownSignals();
int WaitForShutdownSignal();

}  // namespace baton::cli

#endif  // BATON_CLI_SERVE_FLAGS_H_
