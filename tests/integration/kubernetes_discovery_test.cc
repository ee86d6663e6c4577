// Workers found through the Kubernetes API, end to end: a router started with --prefill and
// --decode k8s:SERVICE:grpc reads the EndpointSlices of a stand-in API server
// (tests/support/fake_kubernetes_api.h) with a service account mounted where a pod has it (in a
// mount namespace of the router's own, so root only: skipped elsewhere). A decode worker that
// leaves its Service's ready endpoints mid-stream finishes that stream with the output it would
// have had, is given no new request, and is forgotten once idle.
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "rpc/sampling_params_proto.h"
#include "tests/integration/local_cluster.h"
#include "tests/support/fake_kubernetes_api.h"
#include "tests/support/temp_path.h"

namespace baton {
namespace {

using test_support::EndpointSliceList;
using test_support::FakeEndpoint;
using test_support::GenerateOutcome;
using test_support::LocalCluster;

int Port(const std::string& address) { return std::stoi(address.substr(address.rfind(':') + 1)); }

GenerateOutcome Generate(const LocalCluster& cluster, int max_tokens) {
  baton::v1::GenerateRequest request;
  request.set_prompt("Write a long story about a river that");
  engine::SamplingParams params;
  params.temperature = 0;
  params.max_tokens = max_tokens;
  params.ignore_eos = true;
  *request.mutable_sampling() = rpc::SamplingParamsToProto(params);
  grpc::ClientContext context;
  cluster.Prepare(context, std::chrono::seconds(120));
  return test_support::RunGenerate(*cluster.RouterStub(), context, request);
}

// The prompt tokens the decode worker has looked up in its prefix cache: one lookup per request
// it admits.
int64_t AdmittedTokens(const LocalCluster& cluster, const test_support::Proc& worker) {
  absl::StatusOr<baton::v1::WorkerLoad> load = cluster.Load(worker);
  EXPECT_TRUE(load.ok()) << load.status();
  return load.ok() ? load->prefix_cache().queried_tokens() : -1;
}

// How the router sees the worker at `address`: absent, or its status.
std::optional<baton::v1::WorkerStatus> RouterView(const LocalCluster& cluster,
                                                  const std::string& address) {
  grpc::ClientContext context;
  cluster.Prepare(context);
  baton::v1::ClusterStatusResponse status;
  EXPECT_TRUE(cluster.RouterStub()
                  ->ClusterStatus(&context, baton::v1::ClusterStatusRequest(), &status)
                  .ok());
  for (const auto& w : status.workers()) {
    if (w.address() == address) return w;
  }
  return std::nullopt;
}

TEST(KubernetesDiscoveryTest, ADecodeWorkerThatLeavesItsServiceIsDrainedNotCutOff) {
  if (access("/usr/bin/unshare", X_OK) != 0 ||
      std::system("/usr/bin/unshare --mount true 2>/dev/null") != 0) {
    GTEST_SKIP() << "mount namespaces cannot be made here (root only): the router cannot be "
                    "given a service account where a pod has it";
  }
  const std::string dir = test_support::TempPath("k8s");
  std::filesystem::create_directories(dir);
  test_support::FakeKubernetesApi api(dir, "serving");
  ASSERT_TRUE(api.made()) << "openssl is needed to make a test certificate";
  std::ofstream(dir + "/token") << "router-token";
  std::ofstream(dir + "/namespace") << "serving";

  LocalCluster cluster({}, {});
  absl::StatusOr<test_support::Proc*> prefill = cluster.StartWorker("prefill");
  ASSERT_TRUE(prefill.ok()) << prefill.status();
  absl::StatusOr<test_support::Proc*> first = cluster.StartWorker("decode");
  ASSERT_TRUE(first.ok()) << first.status();
  absl::StatusOr<test_support::Proc*> second = cluster.StartWorker("decode");
  ASSERT_TRUE(second.ok()) << second.status();
  api.SetSlices("baton-prefill",
                EndpointSliceList({{"127.0.0.1", Port((*prefill)->address)}}, "grpc"));
  api.SetSlices("baton-decode", EndpointSliceList({{"127.0.0.1", Port((*first)->address)},
                                                   {"127.0.0.1", Port((*second)->address)}},
                                                  "grpc"));

  // The pod's view: the API's address in the environment, the service account's files at
  // /var/run/secrets/kubernetes.io/serviceaccount (a tmpfs over /run, seen by the router only).
  const std::string mount_service_account = absl::StrCat(
      "mount -t tmpfs tmpfs /run && a=/var/run/secrets/kubernetes.io/serviceaccount && ",
      "mkdir -p $a && cp ", dir, "/token ", dir, "/namespace $a/ && cp ", api.ca_file(),
      " $a/ca.crt && exec \"$0\" \"$@\"");
  ASSERT_TRUE(cluster
                  .StartRouterWrapped(
                      {"/usr/bin/env", "KUBERNETES_SERVICE_HOST=127.0.0.1",
                       absl::StrCat("KUBERNETES_SERVICE_PORT=", api.port()), "/usr/bin/unshare",
                       "--mount", "sh", "-c", mount_service_account},
                      {"--prefill", "k8s:baton-prefill:grpc", "--decode", "k8s:baton-decode:grpc",
                       "--discovery-interval-ms", "200", "--policy", "round-robin"})
                  .ok());
  ASSERT_TRUE(cluster.WaitHealthy(3).ok());
  EXPECT_EQ(api.last_authorization(), "Bearer router-token");

  const GenerateOutcome reference = Generate(cluster, 200);
  ASSERT_TRUE(reference.status.ok()) << reference.status.error_message();

  // A long stream; the decode worker running it leaves the Service (terminating).
  GenerateOutcome long_stream;
  std::thread client([&] { long_stream = Generate(cluster, 200); });
  test_support::Proc* busy = nullptr;
  test_support::Proc* idle = nullptr;
  for (int i = 0; i < 2000 && busy == nullptr; ++i) {
    for (auto [a, b] : {std::pair{*first, *second}, std::pair{*second, *first}}) {
      absl::StatusOr<baton::v1::WorkerLoad> load = cluster.Load(*a);
      if (load.ok() && load->running_sequences() > 0) busy = a, idle = b;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ASSERT_NE(busy, nullptr) << "the long stream never ran";
  const int64_t admitted = AdmittedTokens(cluster, *busy);
  api.SetSlices("baton-decode",
                EndpointSliceList({{"127.0.0.1", Port(busy->address), /*ready=*/false},
                                   {"127.0.0.1", Port(idle->address)}},
                                  "grpc"));
  const int asked = api.requests();
  while (api.requests() < asked + 4) std::this_thread::sleep_for(std::chrono::milliseconds(20));

  // Round robin would give the draining worker every other request: it gets none.
  for (int i = 0; i < 4; ++i) {
    const GenerateOutcome short_one = Generate(cluster, 4);
    ASSERT_TRUE(short_one.status.ok()) << short_one.status.error_message();
  }
  EXPECT_EQ(AdmittedTokens(cluster, *busy), admitted);
  const std::optional<baton::v1::WorkerStatus> draining = RouterView(cluster, busy->address);
  ASSERT_TRUE(draining.has_value()) << "forgotten while its stream runs";
  EXPECT_TRUE(draining->draining());
  EXPECT_FALSE(RouterView(cluster, idle->address)->draining());

  client.join();
  ASSERT_TRUE(long_stream.status.ok()) << long_stream.status.error_message();
  EXPECT_EQ(long_stream.tokens, reference.tokens);
  bool forgotten = false;
  for (int i = 0; i < 100 && !forgotten; ++i) {
    forgotten = !RouterView(cluster, busy->address).has_value();
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_TRUE(forgotten) << "a drained worker that is idle is forgotten";
  EXPECT_TRUE(cluster.WaitEveryWorkerFree().ok());
}

}  // namespace
}  // namespace baton
