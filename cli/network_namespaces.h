// The prefill and decode sides of a local cluster in their own Linux network namespaces, with an
// emulated link between them (`baton up --link`): the same topology and names as
// tests/netns/netns_harness.py, so that either sweeps what the other left behind.
//
//        root namespace (router, listening on router_host(); the user's 127.0.0.1)
//          | rp                  | rd
//    namespace P (prefill)--pd--namespace D (decode)
//
// rp and rd let the router reach both sides and both sides reach it; pd carries the KV hand-off
// and is shaped in both directions: tc tbf at the link's rate, and netem for its one-way delay
// (FAILED_PRECONDITION when the kernel has no netem: the harness's relay does that instead).
// Each side has a service address on its loopback: prefill workers listen on prefill_host();
// decode workers listen on 0.0.0.0 inside D (only root and P reach it) and advertise
// decode_host():PORT, which P reaches over pd and the root namespace over rd.
//
// Needs root and iproute2 (`ip`, `tc`). Everything is removed by the destructor (processes still
// inside the namespaces are killed first), and namespaces named baton-PID-*-p|d whose PID is gone
// are swept on Create.
//
// Thread-compatible.
#ifndef BATON_CLI_NETWORK_NAMESPACES_H_
#define BATON_CLI_NETWORK_NAMESPACES_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "cli/link_spec.h"

namespace baton::cli {

class PdNamespaces {
 public:
  // Decode workers inside D listen on ports known before they start (they advertise them):
  // the first one on this port, the next on the one after.
  static constexpr int kFirstDecodePort = 7200;

  // Makes the namespaces, veths, addresses and routes and shapes pd by `link`. Removes whatever
  // it made when a step fails; the error names the failing command.
  static absl::StatusOr<std::unique_ptr<PdNamespaces>> Create(const LinkSpec& link);
  ~PdNamespaces();
  PdNamespaces(const PdNamespaces&) = delete;
  PdNamespaces& operator=(const PdNamespaces&) = delete;

  std::string router_host() const { return Address(1); }
  std::string prefill_host() const { return Address(17); }
  std::string decode_host() const { return Address(18); }
  const std::string& prefill_namespace() const { return ns_prefill_; }
  const std::string& decode_namespace() const { return ns_decode_; }
  // argv prefix that runs a program inside `ns` (`ip netns exec` execs it: the pid stays).
  static std::vector<std::string> ExecPrefix(const std::string& ns);

 private:
  PdNamespaces();
  std::string Address(int host) const;
  absl::Status Build();
  absl::Status Shape(const LinkSpec& link);

  std::string tag_;
  std::string ns_prefill_;
  std::string ns_decode_;
  int slot_ = -1;
  std::vector<std::string> created_;  // namespaces made so far
};

// Why namespaces cannot be made here (not root, `ip netns add` fails), or OK.
absl::Status NetworkNamespacesAvailable();

}  // namespace baton::cli

#endif  // BATON_CLI_NETWORK_NAMESPACES_H_
