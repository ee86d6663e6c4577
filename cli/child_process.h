// A child process of `baton up` (and of integration tests): started with fork+exec, optionally
// pinned to CPUs, its stdout read line by line (to learn the address it listens on), stopped with
// a signal. The destructor kills it, so no process is ever left behind.
//
// Thread-compatible.
#ifndef BATON_CLI_CHILD_PROCESS_H_
#define BATON_CLI_CHILD_PROCESS_H_

#include <sys/types.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace baton::cli {

class ChildProcess {
 public:
  // argv[0] is the program path. stderr is inherited. `cpus`: pin the child to these CPUs
  // (empty: no pinning).
  static absl::StatusOr<std::unique_ptr<ChildProcess>> Start(const std::vector<std::string>& argv,
                                                             const std::vector<int>& cpus = {});
  ~ChildProcess();

  // Reads stdout until a line starts with `prefix`; returns the rest of that line.
  // DEADLINE_EXCEEDED after `timeout`; FAILED_PRECONDITION if the process exits first.
  absl::StatusOr<std::string> WaitForLine(const std::string& prefix,
                                          std::chrono::milliseconds timeout);

  void Signal(int signal);
  // Waits for exit; returns the exit code (128 + signal when killed), or DEADLINE_EXCEEDED.
  absl::StatusOr<int> Wait(std::chrono::milliseconds timeout);
  pid_t pid() const { return pid_; }

 private:
  ChildProcess(pid_t pid, int stdout_fd) : pid_(pid), stdout_fd_(stdout_fd) {}
  pid_t pid_;
  int stdout_fd_;
  std::string buffer_;
  bool exited_ = false;
  int exit_code_ = 0;
};

// The path of the running executable (to start more `baton` processes).
std::string SelfExecutable();

}  // namespace baton::cli

#endif  // BATON_CLI_CHILD_PROCESS_H_
