// A stand-in for the Kubernetes API server on 127.0.0.1, for the EndpointSlice discovery tests:
// HTTPS with a certificate of its own (tests/support/test_certificate.h), answering
// GET /apis/discovery.k8s.io/v1/namespaces/NAMESPACE/endpointslices?labelSelector=
// kubernetes.io/service-name=SERVICE with the list set for that Service (an empty list for one
// never set), or with the error status set by Fail(). It keeps the last request's selector and
// Authorization header.
//
// Thread-safety: thread-safe; the server answers on its own thread.
#ifndef BATON_TESTS_SUPPORT_FAKE_KUBERNETES_API_H_
#define BATON_TESTS_SUPPORT_FAKE_KUBERNETES_API_H_

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

#include "tests/support/http_server_thread.h"

namespace baton::test_support {

// One endpoint of a Service: its pod's IP, the port the Service's port `port_name` targets there,
// and whether it is ready (not ready: terminating).
struct FakeEndpoint {
  std::string ip;
  int port = 0;
  bool ready = true;
};

// An EndpointSliceList with one IPv4 slice per endpoint (as the API groups endpoints by port:
// pods on one host need a port each), the port named `port_name`.
std::string EndpointSliceList(const std::vector<FakeEndpoint>& endpoints,
                              const std::string& port_name);

class FakeKubernetesApi {
 public:
  // Writes its certificate and key into `dir`. made() is false when openssl failed.
  FakeKubernetesApi(const std::string& dir, const std::string& namespace_name);
  ~FakeKubernetesApi();
  FakeKubernetesApi(const FakeKubernetesApi&) = delete;
  FakeKubernetesApi& operator=(const FakeKubernetesApi&) = delete;

  bool made() const { return made_; }
  const std::string& ca_file() const { return cert_; }  // self-signed: its own CA
  int port() const { return serving_ ? serving_->port() : 0; }

  // What GET for `service` answers from now on.
  void SetSlices(const std::string& service, std::string list_json);
  // Every answer from now on: HTTP `status` with `body`. Fail(200, "") answers normally again.
  void Fail(int status, std::string body);

  std::string last_selector();
  std::string last_authorization();
  int requests();

 private:
  bool made_ = false;
  std::string cert_;
  std::unique_ptr<httplib::SSLServer> server_;
  absl::Mutex mu_;
  std::map<std::string, std::string> slices_ ABSL_GUARDED_BY(mu_);
  int fail_status_ ABSL_GUARDED_BY(mu_) = 200;
  std::string fail_body_ ABSL_GUARDED_BY(mu_);
  std::string selector_ ABSL_GUARDED_BY(mu_);
  std::string authorization_ ABSL_GUARDED_BY(mu_);
  int requests_ ABSL_GUARDED_BY(mu_) = 0;
  std::unique_ptr<HttpServerThread> serving_;  // last: stops serving before the rest goes
};

}  // namespace baton::test_support

#endif  // BATON_TESTS_SUPPORT_FAKE_KUBERNETES_API_H_
