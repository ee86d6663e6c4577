// Routers as replicas: two routers serve the same prefill and decode workers, which report to
// both (worker/router_links.h). Each router has the whole view and answers on its own; one
// killed leaves the other untouched; restarted on its address, it has its workers back within a
// heartbeat period.
#include <signal.h>

#include <chrono>
#include <string>

#include "gtest/gtest.h"
#include "rpc/sampling_params_proto.h"
#include "tests/integration/local_cluster.h"

namespace baton {
namespace {

using test_support::GenerateOutcome;
using test_support::LocalCluster;

GenerateOutcome Generate(const LocalCluster& cluster, const std::string& router) {
  baton::v1::GenerateRequest request;
  request.set_prompt("The capital of France is");
  engine::SamplingParams params;
  params.temperature = 0;
  params.max_tokens = 12;
  *request.mutable_sampling() = rpc::SamplingParamsToProto(params);
  auto stub = cluster.RouterStub(router);
  grpc::ClientContext context;
  cluster.Prepare(context, std::chrono::seconds(120));
  return test_support::RunGenerate(*stub, context, request);
}

TEST(RouterReplicasTest, EitherRouterServesAndOneKilledLeavesTheOther) {
  LocalCluster cluster({}, {});
  ASSERT_TRUE(cluster.StartRouter().ok());
  absl::StatusOr<test_support::Proc*> second = cluster.AddRouter();
  ASSERT_TRUE(second.ok()) << second.status();
  const std::string a = cluster.router_address(), b = (*second)->address;
  ASSERT_TRUE(cluster.StartWorker("prefill").ok());
  ASSERT_TRUE(cluster.StartWorker("decode").ok());
  ASSERT_TRUE(cluster.WaitHealthy(2, std::chrono::seconds(60), a).ok());
  ASSERT_TRUE(cluster.WaitHealthy(2, std::chrono::seconds(60), b).ok());

  const GenerateOutcome via_a = Generate(cluster, a);
  ASSERT_TRUE(via_a.status.ok()) << via_a.status.error_message();
  ASSERT_FALSE(via_a.tokens.empty());
  const GenerateOutcome via_b = Generate(cluster, b);
  ASSERT_TRUE(via_b.status.ok()) << via_b.status.error_message();
  EXPECT_EQ(via_b.tokens, via_a.tokens);

  // Router A killed: B answers at once, as before.
  cluster.router().process->Signal(SIGKILL);
  ASSERT_TRUE(cluster.router().process->Wait(std::chrono::seconds(10)).ok());
  const GenerateOutcome after_kill = Generate(cluster, b);
  ASSERT_TRUE(after_kill.status.ok()) << after_kill.status.error_message();
  EXPECT_EQ(after_kill.tokens, via_a.tokens);

  // Restarted on its address, A is told of both workers by their next heartbeats (every 200 ms
  // here; the restarted router's "unknown worker" answer makes each register again).
  ASSERT_TRUE(cluster.RestartRouter(cluster.router()).ok());
  ASSERT_TRUE(cluster.WaitHealthy(2, std::chrono::seconds(10), a).ok());
  const GenerateOutcome after_restart = Generate(cluster, a);
  ASSERT_TRUE(after_restart.status.ok()) << after_restart.status.error_message();
  EXPECT_EQ(after_restart.tokens, via_a.tokens);
  const absl::Status free = cluster.WaitEveryWorkerFree();
  EXPECT_TRUE(free.ok()) << free;
}

}  // namespace
}  // namespace baton
