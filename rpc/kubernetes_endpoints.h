// A Kubernetes Service's ready endpoints, read from the API's EndpointSlices with the pod's own
// service account (in-cluster configuration): what an address spec "k8s:SERVICE[.NAMESPACE]:PORT"
// resolves to (rpc/address_spec.h). Unlike DNS it sees a pod leave as soon as it stops being
// ready or starts terminating. The service account needs get and list on endpointslices
// (discovery.k8s.io) in the Service's namespace: deploy/k8s-discovery/ grants them.
//
// Thread-safety: the functions are thread-safe; every call makes its own connection.
#ifndef BATON_RPC_KUBERNETES_ENDPOINTS_H_
#define BATON_RPC_KUBERNETES_ENDPOINTS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace baton::rpc {

// Where the API is and how to call it.
struct KubernetesApi {
  std::string host;  // the API server's address (an IP, or a name the CA's certificate names)
  int port = 443;
  std::string token_file;      // bearer token, read at every call (kubelet rotates it)
  std::string ca_file;         // the cluster's CA, which the API server's certificate must chain to
  std::string namespace_name;  // the pod's namespace: where a Service without one is looked up
  absl::Duration timeout = absl::Seconds(5);  // connect, and each read

  // From KUBERNETES_SERVICE_HOST / KUBERNETES_SERVICE_PORT and the service account mounted at
  // /var/run/secrets/kubernetes.io/serviceaccount. FAILED_PRECONDITION naming what is missing
  // outside a pod that has them.
  static absl::StatusOr<KubernetesApi> InCluster();
};

// The addresses ("ip:port", "[ip6]:port"; sorted, each once) of the ready endpoints of `service`
// in `namespace_name` (empty: the api's). `port` is a number, or the name of one of the
// Service's ports. UNAVAILABLE naming the Service when the API cannot be reached or answers with
// an error (its HTTP status and message: 403 is the service account lacking the grant);
// INVALID_ARGUMENT for an answer that is not an EndpointSliceList or a port name no slice has.
absl::StatusOr<std::vector<std::string>> ResolveEndpointSlices(const KubernetesApi& api,
                                                               absl::string_view service,
                                                               absl::string_view namespace_name,
                                                               absl::string_view port);

// The ready endpoints' addresses in an EndpointSliceList (the API's JSON answer): endpoints whose
// conditions.ready is true or absent (the API's meaning of absent), with `port` as above.
absl::StatusOr<std::vector<std::string>> ReadyEndpointAddresses(absl::string_view list_json,
                                                                absl::string_view port);

}  // namespace baton::rpc

#endif  // BATON_RPC_KUBERNETES_ENDPOINTS_H_
