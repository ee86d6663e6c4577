// Tensor parallelism through real clusters: a prefill worker of TP a pushes its KV into a decode
// worker of TP b, for every (a, b) in {1, 2, 4} x {1, 2, 4}, each pair behind a router of its
// own (static worker lists). Gemma 3 270M (4 heads, 1 KV head: replicated on every rank of a
// group) gives the output of a colocated TP 1 worker token for token, greedy and seeded, and
// every worker ends holding no KV block.
#include <map>
#include <memory>
#include <string>
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

}  // namespace
}  // namespace baton
