#include "tests/support/fake_kubernetes_api.h"


#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "httplib.h"
#include "nlohmann/json.hpp"
#include "tests/support/test_certificate.h"

namespace baton::test_support {

std::string EndpointSliceList(const std::vector<FakeEndpoint>& endpoints,
                              const std::string& port_name) {
  nlohmann::json items = nlohmann::json::array();
  for (const FakeEndpoint& e : endpoints) {
    items.push_back(
        {{"addressType", "IPv4"},
         {"ports", nlohmann::json::array({{{"name", port_name}, {"port", e.port}}})},
         {"endpoints",
          nlohmann::json::array(
              {{{"addresses", {e.ip}},
                {"conditions",
                 {{"ready", e.ready}, {"serving", e.ready}, {"terminating", !e.ready}}}}})}});
  }
  return nlohmann::json{
      {"kind", "EndpointSliceList"}, {"apiVersion", "discovery.k8s.io/v1"}, {"items", items}}
      .dump();
}

FakeKubernetesApi::FakeKubernetesApi(const std::string& dir, const std::string& namespace_name) {
  absl::StatusOr<TestCertificate> certificate = MakeTestCertificate(dir + "/api-");
  made_ = certificate.ok();
  if (!made_) return;
  cert_ = certificate->cert;
  server_ = std::make_unique<httplib::SSLServer>(cert_.c_str(), certificate->key.c_str());
  server_->Get(
      absl::StrCat("/apis/discovery.k8s.io/v1/namespaces/", namespace_name, "/endpointslices"),
      [this](const httplib::Request& request, httplib::Response& response) {
        absl::MutexLock lock(&mu_);
        ++requests_;
        selector_ = request.get_param_value("labelSelector");
        authorization_ = request.get_header_value("Authorization");
        if (fail_status_ != 200) {
          response.status = fail_status_;
          response.set_content(fail_body_, "application/json");
          return;
        }
        absl::string_view service = selector_;
        absl::ConsumePrefix(&service, "kubernetes.io/service-name=");
        const auto it = slices_.find(std::string(service));
        response.set_content(it != slices_.end() ? it->second : R"({"items": []})",
                             "application/json");
      });
  serving_ = std::make_unique<HttpServerThread>(server_.get());
}

FakeKubernetesApi::~FakeKubernetesApi() = default;

void FakeKubernetesApi::SetSlices(const std::string& service, std::string list_json) {
  absl::MutexLock lock(&mu_);
  slices_[service] = std::move(list_json);
}

void FakeKubernetesApi::Fail(int status, std::string body) {
  absl::MutexLock lock(&mu_);
  fail_status_ = status;
  fail_body_ = std::move(body);
}

std::string FakeKubernetesApi::last_selector() {
  absl::MutexLock lock(&mu_);
  return selector_;
}

std::string FakeKubernetesApi::last_authorization() {
  absl::MutexLock lock(&mu_);
  return authorization_;
}

int FakeKubernetesApi::requests() {
  absl::MutexLock lock(&mu_);
  return requests_;
}

}  // namespace baton::test_support
