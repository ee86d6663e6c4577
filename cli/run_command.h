// Runs a short command to completion (e.g. `ip`, `tc`) and returns its output: what
// cli/network_namespaces.h builds namespaces with.
//
// Thread-safe (each call forks its own child).
#ifndef BATON_CLI_RUN_COMMAND_H_
#define BATON_CLI_RUN_COMMAND_H_

#include <chrono>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace baton::cli {

// argv[0] is looked up in PATH. Returns stdout and stderr together when it exits 0;
// INTERNAL naming the command line, its exit code and its output otherwise; DEADLINE_EXCEEDED
// (after killing it) past `timeout`.
absl::StatusOr<std::string> RunCommand(const std::vector<std::string>& argv,
                                       std::chrono::milliseconds timeout = std::chrono::seconds(10));

}  // namespace baton::cli

#endif  // BATON_CLI_RUN_COMMAND_H_
