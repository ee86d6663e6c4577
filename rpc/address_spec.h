// Where a process finds its peers, named by a spec on its command line:
//   - "HOST:PORT[,HOST:PORT...]": a static list;
//   - "dns:NAME:PORT": every address NAME resolves to, as a Kubernetes headless Service resolves to
//     each of its ready pods;
//   - "k8s:SERVICE[.NAMESPACE]:PORT": the ready endpoints of a Kubernetes Service, from the API's
//     EndpointSlices with the pod's service account (rpc/kubernetes_endpoints.h); PORT is a number
//     or the name of one of the Service's ports.
// Callers resolve the last two again every few seconds to follow the pods.
// Workers name their routers so (worker/router_links.h); routers name the workers they discover
// so (router/worker_discovery.h).
//
// Thread-safety: the functions are thread-safe (getaddrinfo; one API connection per call).
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
  std::string k8s_service;  // a k8s: spec: the Service, its namespace (empty: the pod's)
  std::string k8s_namespace;
  std::string k8s_port;  // a number or a port's name

  bool is_dns() const { return !dns_name.empty(); }
  bool is_k8s() const { return !k8s_service.empty(); }
  // Resolved again every few seconds by its users.
  bool is_dynamic() const { return is_dns() || is_k8s(); }
};

// The spec's syntax only (nothing is resolved). INVALID_ARGUMENT naming `flag` and the spec for a
// malformed one.
absl::StatusOr<AddressSpec> ParseAddressSpec(absl::string_view flag, const std::string& spec);

// The spec's addresses now: the list, or the name's or the Service's addresses ("ip:port" or
// "[ip6]:port", sorted, without repeats). UNAVAILABLE naming the flag when the name does not
// resolve or the Kubernetes API does not answer; FAILED_PRECONDITION for a k8s: spec outside a pod
// with a service account.
absl::StatusOr<std::vector<std::string>> ResolveAddresses(absl::string_view flag,
                                                          const AddressSpec& spec);

// ParseAddressSpec, then ResolveAddresses.
absl::StatusOr<std::vector<std::string>> ResolveAddressSpec(absl::string_view flag,
                                                            const std::string& spec);

}  // namespace baton::rpc

#endif  // BATON_RPC_ADDRESS_SPEC_H_
