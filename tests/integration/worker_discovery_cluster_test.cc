// Workers found where they run: a router started with --prefill/--decode dns:NAME:PORT finds
// workers that never registered with it (router/worker_discovery.h) and serves through them.
#include <chrono>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "rpc/sampling_params_proto.h"
#include "tests/integration/local_cluster.h"

namespace baton {
namespace {

using test_support::LocalCluster;

std::string Port(const std::string& address) { return address.substr(address.rfind(':') + 1); }

TEST(WorkerDiscoveryClusterTest, ARouterFindsWorkersByNameAndServesThroughThem) {
  LocalCluster cluster({}, {});
  absl::StatusOr<test_support::Proc*> prefill = cluster.StartWorker("prefill");
  ASSERT_TRUE(prefill.ok()) << prefill.status();
  absl::StatusOr<test_support::Proc*> decode = cluster.StartWorker("decode");
  ASSERT_TRUE(decode.ok()) << decode.status();
  // localhost: 127.0.0.1, where the workers listen (and ::1 where it resolves there too, which
  // no worker answers: found, never healthy).
  ASSERT_TRUE(
      cluster
          .StartRouter({"--prefill", absl::StrCat("dns:localhost:", Port((*prefill)->address)),
                        "--decode", absl::StrCat("dns:localhost:", Port((*decode)->address))})
          .ok());
  ASSERT_TRUE(cluster.WaitHealthy(2).ok());

  grpc::ClientContext status_context;
  cluster.Prepare(status_context);
  baton::v1::ClusterStatusResponse status;
  ASSERT_TRUE(cluster.RouterStub()
                  ->ClusterStatus(&status_context, baton::v1::ClusterStatusRequest(), &status)
                  .ok());
  int healthy_found = 0;
  for (const auto& w : status.workers()) {
    if (!w.healthy()) continue;
    ++healthy_found;
    EXPECT_TRUE(w.address() == (*prefill)->address || w.address() == (*decode)->address)
        << w.address();
  }
  EXPECT_EQ(healthy_found, 2);

  baton::v1::GenerateRequest request;
  request.set_prompt("The capital of France is");
  engine::SamplingParams params;
  params.temperature = 0;
  params.max_tokens = 8;
  *request.mutable_sampling() = rpc::SamplingParamsToProto(params);
  grpc::ClientContext context;
  cluster.Prepare(context);
  test_support::GenerateOutcome out =
      test_support::RunGenerate(*cluster.RouterStub(), context, request);
  ASSERT_TRUE(out.status.ok()) << out.status.error_message();
  EXPECT_EQ(out.tokens.size(), 8u);
  EXPECT_TRUE(cluster.WaitEveryWorkerFree().ok());
}

}  // namespace
}  // namespace baton
