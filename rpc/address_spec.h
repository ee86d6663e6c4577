// Where a process finds its peers, named by a spec on its command line:
//   - "HOST:PORT[,HOST:PORT...]": a static list;
//   - "dns:NAME:PORT": every address NAME resolves to, as a Kubernetes headless Service resolves to
//     each of its ready pods. Callers resolve it again every few seconds to follow the pods.
// Workers name their routers so (worker/router_links.h); routers name the workers they discover
// so (router/worker_discovery.h).
//
// Thread-safety: the functions are thread-safe (getaddrinfo).
#ifndef BATON_RPC_ADDRESS_SPEC_H_
#define BATON_RPC_ADDRESS_SPEC_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace baton::rpc {

struct AddressSpec {
  std::string text;               // as given, for messages
  std::vector<std::string> list;  // a static list: its addresses, each once
  std::string dns_name;           // a dns: spec: the name, and the port of every address
  int dns_port = 0;

  bool is_dns() const { return !dns_name.empty(); }
};

// The spec's syntax only (nothing is resolved). INVALID_ARGUMENT naming `flag` and the spec for a
// malformed one.
absl::StatusOr<AddressSpec> ParseAddressSpec(absl::string_view flag, const std::string& spec);

// The spec's addresses now: the list, or the name's addresses ("ip:port" or "[ip6]:port", sorted,
// without repeats). UNAVAILABLE naming the flag when the name does not resolve.
absl::StatusOr<std::vector<std::string>> ResolveAddresses(absl::string_view flag,
                                                          const AddressSpec& spec);

// ParseAddressSpec, then ResolveAddresses.
absl::StatusOr<std::vector<std::string>> ResolveAddressSpec(absl::string_view flag,
                                                            const std::string& spec);

}  // namespace baton::rpc

#endif  // BATON_RPC_ADDRESS_SPEC_H_
