// Routers as replicas: two routers serve the same prefill and decode workers, which report to
// both (worker/router_links.h). Each router has the whole view and answers on its own; one
// killed leaves the other untouched; restarted on its address, it has its workers back within a
// heartbeat period.
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <chrono>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "gtest/gtest.h"
#include "rpc/sampling_params_proto.h"
#include "tests/integration/local_cluster.h"

namespace baton {
namespace {

using test_support::GenerateOutcome;
using test_support::LocalCluster;

GenerateOutcome Generate(const LocalCluster& cluster, const std::string& router,
                         const std::string& prompt = "The capital of France is",
                         int max_tokens = 12) {
  baton::v1::GenerateRequest request;
  request.set_prompt(prompt);
  engine::SamplingParams params;
  params.temperature = 0;
  params.max_tokens = max_tokens;
  *request.mutable_sampling() = rpc::SamplingParamsToProto(params);
  auto stub = cluster.RouterStub(router);
  grpc::ClientContext context;
  cluster.Prepare(context, std::chrono::seconds(120));
  return test_support::RunGenerate(*stub, context, request);
}

// Two routers (flags `router_args`, addresses into `a` and `b`), then a prefill and a decode
// worker reporting to both, healthy on both.
void StartTwoRouters(LocalCluster& cluster, const std::vector<std::string>& router_args,
                     std::string& a, std::string& b) {
  ASSERT_TRUE(cluster.StartRouter(router_args).ok());
  absl::StatusOr<test_support::Proc*> second = cluster.AddRouter(router_args);
  ASSERT_TRUE(second.ok()) << second.status();
  a = cluster.router_address();
  b = (*second)->address;
  ASSERT_TRUE(cluster.StartWorker("prefill").ok());
  ASSERT_TRUE(cluster.StartWorker("decode").ok());
  ASSERT_TRUE(cluster.WaitHealthy(2, std::chrono::seconds(60), a).ok());
  ASSERT_TRUE(cluster.WaitHealthy(2, std::chrono::seconds(60), b).ok());
}

TEST(RouterReplicasTest, EitherRouterServesAndOneKilledLeavesTheOther) {
  LocalCluster cluster({}, {});
  std::string a, b;
  ASSERT_NO_FATAL_FAILURE(StartTwoRouters(cluster, {}, a, b));

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

// A small soak: clients send greedy requests through both routers while router A is killed and
// restarted three times (BATON_ROUTER_SOAK_KILLS times when set: a longer soak outside CI).
// Every request through B completes with the same tokens as before the kills; through A, each
// completes identically or fails with UNAVAILABLE (in flight on it, or sent while it was down);
// none hangs; and once the clients stop, no worker holds a block (A's orphaned reservations lapse
// within the routers' 3 s lease).
TEST(RouterReplicasTest, KillingARouterUnderLoadLosesOnlyItsOwnRequests) {
  LocalCluster cluster({}, {});
  const std::vector<std::string> lease = {"--reservation-lease", "3"};
  std::string a, b;
  ASSERT_NO_FATAL_FAILURE(StartTwoRouters(cluster, lease, a, b));

  const std::vector<std::string> prompts = {"Once upon a time", "The best way to learn is",
                                            "Rivers flow to the"};
  std::vector<std::vector<int32_t>> expected;
  for (const std::string& prompt : prompts) {
    const GenerateOutcome o = Generate(cluster, b, prompt, 24);
    ASSERT_TRUE(o.status.ok()) << o.status.error_message();
    expected.push_back(o.tokens);
  }

  struct Outcome {
    bool via_a;
    size_t prompt;
    GenerateOutcome result;
  };
  std::atomic<bool> stop{false};
  absl::Mutex mu;
  std::vector<Outcome> outcomes;
  std::vector<std::thread> clients;
  for (int c = 0; c < 4; ++c) {
    clients.emplace_back([&, c] {
      for (int i = 0; !stop.load(); ++i) {
        const bool via_a = (c + i) % 2 == 0;
        const size_t prompt = static_cast<size_t>(c + i) % prompts.size();
        GenerateOutcome result = Generate(cluster, via_a ? a : b, prompts[prompt], 24);
        absl::MutexLock lock(&mu);
        outcomes.push_back({via_a, prompt, std::move(result)});
      }
    });
  }
  const char* kills_env = std::getenv("BATON_ROUTER_SOAK_KILLS");
  const int kills = kills_env != nullptr ? std::max(1, std::atoi(kills_env)) : 3;
  for (int kill = 0; kill < kills; ++kill) {
    std::this_thread::sleep_for(std::chrono::milliseconds(400));
    cluster.router().process->Signal(SIGKILL);
    ASSERT_TRUE(cluster.router().process->Wait(std::chrono::seconds(10)).ok());
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    ASSERT_TRUE(cluster.RestartRouter(cluster.router(), lease).ok());
    ASSERT_TRUE(cluster.WaitHealthy(2, std::chrono::seconds(10), a).ok());
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(400));
  stop = true;
  for (std::thread& t : clients) t.join();

  int via_b = 0, completed_a = 0, failed_a = 0;
  for (const Outcome& o : outcomes) {
    if (!o.via_a) {
      ++via_b;
      EXPECT_TRUE(o.result.status.ok()) << "through B: " << o.result.status.error_message();
      EXPECT_EQ(o.result.tokens, expected[o.prompt]);
    } else if (o.result.status.ok()) {
      ++completed_a;
      EXPECT_EQ(o.result.tokens, expected[o.prompt]);
    } else {
      ++failed_a;
      EXPECT_EQ(o.result.status.error_code(), grpc::StatusCode::UNAVAILABLE)
          << o.result.status.error_message();
    }
  }
  std::cout << "requests " << outcomes.size() << ": through B " << via_b
            << " (all completed identically), through A " << completed_a << " completed, "
            << failed_a << " failed cleanly across " << kills << " kills\n";
  EXPECT_GT(via_b, 0);
  const absl::Status free = cluster.WaitEveryWorkerFree(std::chrono::seconds(15));
  EXPECT_TRUE(free.ok()) << free;
}

}  // namespace
}  // namespace baton
