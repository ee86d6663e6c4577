// Tensor parallelism through real clusters: a prefill worker of TP a pushes its KV into a decode
// worker of TP b, for every (a, b) in {1, 2, 4} x {1, 2, 4}, each pair behind a router of its
// own (static worker lists). Gemma 3 270M (4 heads, 1 KV head: replicated on every rank of a
// group) gives the output of a colocated TP 1 worker token for token, greedy and seeded, and
// every worker ends holding no KV block; a prefill group killed mid-push leaves none either.
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/integration/local_cluster.h"
#include "tests/support/test_paths.h"

namespace baton {
namespace {

using test_support::GenerateOutcome;
using test_support::LocalCluster;
using test_support::Proc;

std::vector<baton::v1::GenerateRequest> Requests() {
  baton::v1::GenerateRequest greedy;
  greedy.set_prompt("The lighthouse keeper counted the ships that passed");
  greedy.mutable_sampling()->set_temperature(0.0f);
  greedy.mutable_sampling()->set_max_tokens(24);
  greedy.mutable_sampling()->set_ignore_eos(true);
  baton::v1::GenerateRequest seeded = test_support::SampledStoryRequest(11);
  seeded.mutable_sampling()->set_max_tokens(24);
  return {greedy, seeded};
}

std::vector<std::vector<int32_t>> GenerateAll(const LocalCluster& cluster,
                                              const std::string& router) {
  std::vector<std::vector<int32_t>> outputs;
  auto stub = cluster.RouterStub(router);
  for (const baton::v1::GenerateRequest& request : Requests()) {
    grpc::ClientContext context;
    cluster.Prepare(context, std::chrono::seconds(120));
    GenerateOutcome outcome = test_support::RunGenerate(*stub, context, request);
    EXPECT_TRUE(outcome.status.ok()) << outcome.status.error_message();
    EXPECT_EQ(outcome.tokens.size(), 24u);
    outputs.push_back(outcome.tokens);
  }
  return outputs;
}

TEST(TensorParallelClusterTest, EveryPairOfSizesGivesTheColocatedOutput) {
  LocalCluster cluster({}, {});
  cluster.set_model(test_support::SourcePath("models/gemma-3-270m-q4_k_m.gguf"));
  // The workers first, each found by the routers that list it.
  std::map<int, Proc*> prefill;
  std::map<int, Proc*> decode;
  for (int tp : {1, 2, 4}) {
    const std::vector<std::string> flags = {"--tensor-parallel", std::to_string(tp)};
    absl::StatusOr<Proc*> p = cluster.StartWorker("prefill", flags);
    ASSERT_TRUE(p.ok()) << p.status();
    prefill[tp] = *p;
    absl::StatusOr<Proc*> d = cluster.StartWorker("decode", flags);
    ASSERT_TRUE(d.ok()) << d.status();
    decode[tp] = *d;
  }
  absl::StatusOr<Proc*> colocated = cluster.StartWorker("both");
  ASSERT_TRUE(colocated.ok()) << colocated.status();

  ASSERT_TRUE(cluster.StartRouter({"--colocated", (*colocated)->address}).ok());
  ASSERT_TRUE(cluster.WaitHealthy(1).ok());
  const std::vector<std::vector<int32_t>> expected =
      GenerateAll(cluster, cluster.router_address());

  for (int a : {1, 2, 4}) {
    for (int b : {1, 2, 4}) {
      SCOPED_TRACE(absl::StrCat("prefill TP ", a, ", decode TP ", b));
      absl::StatusOr<Proc*> router = cluster.AddRouter(
          {"--prefill", prefill[a]->address, "--decode", decode[b]->address});
      ASSERT_TRUE(router.ok()) << router.status();
      ASSERT_TRUE(cluster.WaitHealthy(2, std::chrono::seconds(60), (*router)->address).ok());
      EXPECT_EQ(GenerateAll(cluster, (*router)->address), expected);
    }
  }
  absl::Status free = cluster.WaitEveryWorkerFree();
  EXPECT_TRUE(free.ok()) << free;
}

// A prefill group killed in the middle of its push of a long prompt into a decode group: the
// request fails with UNAVAILABLE within its bounds, and the decode group (whose ranks share one
// pool of block ids) ends holding no block on any rank.
TEST(TensorParallelClusterTest, APrefillGroupKilledMidPushLeavesTheDecodeGroupNoBlock) {
  LocalCluster cluster({}, {});
  cluster.set_model(test_support::SourcePath("models/gemma-3-270m-q4_k_m.gguf"));
  const std::vector<std::string> flags = {"--tensor-parallel", "2"};
  absl::StatusOr<Proc*> prefill = cluster.StartWorker("prefill", flags);
  ASSERT_TRUE(prefill.ok()) << prefill.status();
  absl::StatusOr<Proc*> decode = cluster.StartWorker("decode", flags);
  ASSERT_TRUE(decode.ok()) << decode.status();
  ASSERT_TRUE(cluster
                  .StartRouter({"--prefill", (*prefill)->address, "--decode", (*decode)->address,
                                "--no-worker-timeout", "5"})
                  .ok());
  ASSERT_TRUE(cluster.WaitHealthy(2).ok());

  baton::v1::GenerateRequest request;
  std::string prompt;
  for (int i = 0; i < 300; ++i) prompt += "The quick brown fox jumps over the lazy dog. ";
  request.set_prompt(prompt);
  request.mutable_sampling()->set_temperature(0.0f);
  request.mutable_sampling()->set_max_tokens(8);
  // Killed between the prompt's two chunks (2,048 tokens, then the rest): the first chunk's
  // KV, every layer of it, has been pushed, the second's not. The prefill worker's queue says
  // when: its count drops once the first chunk's pass has ended.
  bool killed_between_chunks = false;
  std::thread killer([&] {
    int64_t peak = 0;
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (std::chrono::steady_clock::now() < give_up) {
      absl::StatusOr<baton::v1::WorkerLoad> load = cluster.Load(**prefill);
      const int64_t queued = load.ok() ? load->queued_prompt_tokens() : 0;
      if (queued > 0 && queued < peak) {
        killed_between_chunks = true;
        break;
      }
      peak = std::max(peak, queued);
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    (*prefill)->process->Signal(SIGKILL);
  });
  const auto start = std::chrono::steady_clock::now();
  auto stub = cluster.RouterStub();
  grpc::ClientContext context;
  cluster.Prepare(context, std::chrono::seconds(60));
  GenerateOutcome doomed = test_support::RunGenerate(*stub, context, request);
  killer.join();
  EXPECT_TRUE(killed_between_chunks);
  EXPECT_EQ(doomed.status.error_code(), grpc::StatusCode::UNAVAILABLE)
      << doomed.status.error_message();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(60));
  absl::Status free = cluster.WaitEveryWorkerFree();
  EXPECT_TRUE(free.ok()) << free;
}

}  // namespace
}  // namespace baton
