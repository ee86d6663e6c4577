// A Kubernetes Service's ready endpoints from the API's EndpointSlices: the answer's reading, and
// the call itself against a TLS server on loopback that answers as the API server does.
#include "rpc/kubernetes_endpoints.h"

#include <stdlib.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rpc/address_spec.h"
#include "tests/support/fake_kubernetes_api.h"
#include "tests/support/temp_path.h"

namespace baton::rpc {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

// Two slices of one Service, as the API lists them: IPv4 and IPv6, a pod terminating (not
// ready), one without conditions (ready), the port named "grpc".
constexpr char kSlices[] = R"({
  "kind": "EndpointSliceList", "apiVersion": "discovery.k8s.io/v1",
  "items": [
    {"addressType": "IPv4", "ports": [{"name": "grpc", "port": 7100, "protocol": "TCP"}],
     "endpoints": [
       {"addresses": ["10.1.0.7"], "conditions": {"ready": true, "serving": true}},
       {"addresses": ["10.1.0.3"], "conditions": {"ready": false, "terminating": true}},
       {"addresses": ["10.1.0.5"]}]},
    {"addressType": "IPv6", "ports": [{"name": "grpc", "port": 7100}],
     "endpoints": [{"addresses": ["fd00::9"], "conditions": {"ready": true}}]}
  ]})";

TEST(ReadyEndpointAddressesTest, ReadyEndpointsOnTheNamedPort) {
  absl::StatusOr<std::vector<std::string>> a = ReadyEndpointAddresses(kSlices, "grpc");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_THAT(*a, ElementsAre("10.1.0.5:7100", "10.1.0.7:7100", "[fd00::9]:7100"));
  a = ReadyEndpointAddresses(kSlices, "7300");  // a number is taken as it is
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_THAT(*a, ElementsAre("10.1.0.5:7300", "10.1.0.7:7300", "[fd00::9]:7300"));
}

TEST(ReadyEndpointAddressesTest, NoSlicesIsNoAddressesAndBadAnswersAreNamed) {
  absl::StatusOr<std::vector<std::string>> a = ReadyEndpointAddresses(R"({"items": []})", "grpc");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_THAT(*a, IsEmpty());
  a = ReadyEndpointAddresses(kSlices, "http");
  EXPECT_EQ(a.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(a.status().message(), HasSubstr("has a port named 'http'"));
  for (const char* bad : {"", "not json", "[]", R"({"items": 3})", R"({"kind": "Status"})"}) {
    a = ReadyEndpointAddresses(bad, "grpc");
    EXPECT_EQ(a.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(a.status().message(), HasSubstr("not an EndpointSliceList")) << bad;
  }
  // Fields of the wrong type are skipped, not trusted.
  a = ReadyEndpointAddresses(
      R"({"items": [{"ports": [{"name": "grpc", "port": "x"}, {"name": "grpc", "port": 9}],
                     "endpoints": [{"addresses": [5, "10.0.0.1"], "conditions": "x"}, 7]}]})",
      "grpc");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_THAT(*a, ElementsAre("10.0.0.1:9"));
}

TEST(KubernetesAddressSpecTest, ParsesServiceNamespaceAndPort) {
  absl::StatusOr<AddressSpec> spec = ParseAddressSpec("--decode", "k8s:baton-decode:grpc");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_TRUE(spec->is_k8s());
  EXPECT_TRUE(spec->is_dynamic());
  EXPECT_EQ(spec->k8s_service, "baton-decode");
  EXPECT_EQ(spec->k8s_namespace, "");
  EXPECT_EQ(spec->k8s_port, "grpc");
  spec = ParseAddressSpec("--decode", "k8s:baton-decode.serving:7200");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->k8s_namespace, "serving");
  EXPECT_EQ(spec->k8s_port, "7200");
  for (const char* bad : {"k8s:", "k8s:svc", "k8s:Svc:7200", "k8s:svc:0", "k8s:svc:70000",
                          "k8s:svc:port-name-too-long", "k8s:svc.:7200", "k8s:-svc:7200",
                          "k8s:svc/x:7200", "k8s:svc.a.b:7200", "k8s:svc:123-"}) {
    absl::StatusOr<AddressSpec> r = ParseAddressSpec("--decode", bad);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(r.status().message(), HasSubstr(absl::StrCat("--decode '", bad, "'"))) << bad;
  }
}

TEST(KubernetesApiTest, OutsideAPodTheInClusterConfigurationIsMissing) {
  const char* host = std::getenv("KUBERNETES_SERVICE_HOST");
  const std::string saved = host != nullptr ? host : "";
  unsetenv("KUBERNETES_SERVICE_HOST");
  absl::StatusOr<KubernetesApi> api = KubernetesApi::InCluster();
  EXPECT_EQ(api.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(api.status().message(), HasSubstr("KUBERNETES_SERVICE_HOST"));
  absl::StatusOr<std::vector<std::string>> a = ResolveAddressSpec("--decode", "k8s:svc:7200");
  EXPECT_EQ(a.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(a.status().message(), HasSubstr("--decode 'k8s:svc:7200': not in a Kubernetes pod"));
  if (host != nullptr) setenv("KUBERNETES_SERVICE_HOST", saved.c_str(), 1);
}

class ResolveEndpointSlicesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = test_support::TempPath("k8s-api");
    std::filesystem::create_directories(dir_);
    server_ = std::make_unique<test_support::FakeKubernetesApi>(dir_, "serving");
    ASSERT_TRUE(server_->made()) << "openssl is needed to make a test certificate";
    std::ofstream(dir_ + "/token") << "secret-token\n";
    api_ = {.host = "127.0.0.1",
            .port = server_->port(),
            .token_file = dir_ + "/token",
            .ca_file = server_->ca_file(),
            .namespace_name = "serving"};
  }

  std::string dir_;
  std::unique_ptr<test_support::FakeKubernetesApi> server_;
  KubernetesApi api_;
};

TEST_F(ResolveEndpointSlicesTest, AsksForTheServicesSlicesWithTheToken) {
  server_->SetSlices("baton-decode", kSlices);
  absl::StatusOr<std::vector<std::string>> a =
      ResolveEndpointSlices(api_, "baton-decode", "", "grpc");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_THAT(*a, ElementsAre("10.1.0.5:7100", "10.1.0.7:7100", "[fd00::9]:7100"));
  EXPECT_EQ(server_->last_selector(), "kubernetes.io/service-name=baton-decode");
  EXPECT_EQ(server_->last_authorization(), "Bearer secret-token");
}

TEST_F(ResolveEndpointSlicesTest, AnErrorAnswerIsUnavailableWithTheApisMessage) {
  server_->Fail(403, R"({"kind": "Status", "message": "endpointslices.discovery.k8s.io is )"
                     R"(forbidden: User cannot list resource", "code": 403})");
  absl::StatusOr<std::vector<std::string>> a =
      ResolveEndpointSlices(api_, "baton-decode", "", "grpc");
  EXPECT_EQ(a.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(a.status().message(), HasSubstr("Service serving/baton-decode"));
  EXPECT_THAT(a.status().message(),
              HasSubstr("HTTP 403: endpointslices.discovery.k8s.io is forbidden"));
}

TEST_F(ResolveEndpointSlicesTest, AServerTheClusterCaDoesNotVouchForIsRefused) {
  server_->SetSlices("baton-decode", kSlices);
  const std::string other = dir_ + "/other";
  std::filesystem::create_directories(other);
  test_support::FakeKubernetesApi impostor(other, "serving");
  ASSERT_TRUE(impostor.made());
  impostor.SetSlices("baton-decode", kSlices);
  KubernetesApi api = api_;
  api.port = impostor.port();  // the cluster's CA, another server's certificate
  absl::StatusOr<std::vector<std::string>> a =
      ResolveEndpointSlices(api, "baton-decode", "", "grpc");
  EXPECT_EQ(a.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(a.status().message(), HasSubstr("cannot be reached"));
}

TEST_F(ResolveEndpointSlicesTest, NoTokenIsAFailedPreconditionAndNoServerUnavailable) {
  KubernetesApi api = api_;
  api.token_file = dir_ + "/missing";
  absl::StatusOr<std::vector<std::string>> a =
      ResolveEndpointSlices(api, "baton-decode", "", "grpc");
  EXPECT_EQ(a.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(a.status().message(), HasSubstr("no service account token"));
  api = api_;
  api.port = 1;  // nothing listens
  a = ResolveEndpointSlices(api, "baton-decode", "", "grpc");
  EXPECT_EQ(a.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(a.status().message(), HasSubstr("127.0.0.1:1 cannot be reached"));
}

}  // namespace
}  // namespace baton::rpc
