// Prefix caching and KV-aware routing across real processes: a conversation's later turns hit
// the prefill and decode workers' caches and stay on the worker that holds them, without a token
// changing (compared with in-process generation); a decode worker that restarts advertises an
// empty cache, and the router's view of it is empty too.
#include <signal.h>

#include <memory>
#include <string>
#include <vector>

#include "engine/generator.h"
#include "engine/model.h"
#include "gtest/gtest.h"
#include "rpc/sampling_params_proto.h"
#include "tests/integration/local_cluster.h"
#include "tests/support/test_paths.h"

namespace baton {
namespace {

using test_support::GenerateOutcome;
using test_support::LocalCluster;
using test_support::Proc;

// The router's view of the worker at `address` (nullopt when it lists none there).
std::optional<v1::WorkerStatus> RouterView(LocalCluster& local, const std::string& address) {
  auto stub = local.RouterStub();
  grpc::ClientContext context;
  local.Prepare(context, std::chrono::seconds(5));
  v1::ClusterStatusResponse status;
  if (!stub->ClusterStatus(&context, v1::ClusterStatusRequest(), &status).ok()) return std::nullopt;
  for (const v1::WorkerStatus& w : status.workers()) {
    if (w.address() == address) return w;
  }
  return std::nullopt;
}

// Polls the router's view of `address` until `pred` holds (true) or 20 s pass (false).
template <typename Pred>
bool AwaitRouterView(LocalCluster& local, const std::string& address, Pred pred) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (std::chrono::steady_clock::now() < until) {
    std::optional<v1::WorkerStatus> w = RouterView(local, address);
    if (w && pred(*w)) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return false;
}

class PrefixCacheClusterTest : public testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<engine::Model>> model =
        engine::Model::Load(test_support::DefaultModelPath());
    ASSERT_TRUE(model.ok()) << model.status();
    model_ = *std::move(model);
    absl::StatusOr<std::unique_ptr<engine::Generator>> generator =
        engine::Generator::Create(model_.get(), {.n_threads = 1, .max_context = 2048});
    ASSERT_TRUE(generator.ok()) << generator.status();
    generator_ = *std::move(generator);
    ASSERT_TRUE(local_.StartRouter({"--policy", "kv-aware", "--heartbeat-ms", "100"}).ok());
    ASSERT_TRUE(local_.StartWorker("prefill").ok());
    for (int i = 0; i < 2; ++i) {
      absl::StatusOr<Proc*> decode = local_.StartWorker("decode");
      ASSERT_TRUE(decode.ok()) << decode.status();
      decode_.push_back(*decode);
    }
    ASSERT_TRUE(local_.WaitHealthy(3).ok());
  }

  // One turn through the cluster, checked against in-process generation of the same prompt.
  GenerateOutcome Turn(const std::string& prompt) {
    const engine::SamplingParams params{.temperature = 0.8f, .top_k = 40, .seed = 99,
                                        .max_tokens = 16};
    v1::GenerateRequest request;
    request.set_prompt(prompt);
    *request.mutable_sampling() = rpc::SamplingParamsToProto(params);
    auto stub = local_.RouterStub();
    grpc::ClientContext context;
    local_.Prepare(context, std::chrono::seconds(120));
    GenerateOutcome remote = test_support::RunGenerate(*stub, context, request);
    EXPECT_TRUE(remote.status.ok()) << remote.status.error_message();
    const engine::Tokenizer& tok = model_->tokenizer();
    const std::vector<engine::TokenId> ids =
        tok.Encode(prompt, {.add_bos = tok.vocab().add_bos, .parse_special = true});
    std::string local_text;
    absl::StatusOr<engine::GenerationResult> local =
        generator_->Generate(ids, params, [&](std::string_view t) { local_text += t; });
    EXPECT_TRUE(local.ok()) << local.status();
    EXPECT_EQ(remote.text, local_text) << "prompt of " << ids.size() << " tokens";
    return remote;
  }

  std::unique_ptr<engine::Model> model_;
  std::unique_ptr<engine::Generator> generator_;
  LocalCluster local_{{}, {}};
  std::vector<Proc*> decode_;
};

TEST_F(PrefixCacheClusterTest, LaterTurnsHitBothCachesOnTheSameWorkersWithoutChangingAToken) {
  std::string history = "System: You are a lighthouse keeper who answers in short sentences.";
  for (int i = 0; i < 12; ++i) history += " Ships pass the rocks at night and the lamp must burn.";
  const std::vector<std::string> users = {"How many ships came?", "Which one was late?",
                                          "What did you do then?"};
  std::string holder;
  for (size_t turn = 0; turn < users.size(); ++turn) {
    const std::string prompt = history + "\n\nUser: " + users[turn] + "\n\nAssistant:";
    GenerateOutcome out = Turn(prompt);
    ASSERT_TRUE(out.status.ok());
    const v1::Timings& t = out.last.timings();
    if (turn == 0) {
      holder = t.decode_worker();
      EXPECT_EQ(t.prefill_cached_tokens(), 0);
      EXPECT_EQ(t.decode_cached_tokens(), 0);
    } else {
      // Everything up to this turn's new text was computed before: both sides hold most of it.
      EXPECT_GT(t.prefill_cached_tokens(), 100) << "turn " << turn;
      EXPECT_GT(t.decode_cached_tokens(), 100) << "turn " << turn;
      EXPECT_EQ(t.decode_worker(), holder) << "turn " << turn << " left the worker holding it";
    }
    history = prompt + out.text;
  }
  EXPECT_TRUE(AwaitRouterView(local_, holder, [](const v1::WorkerStatus& w) {
    return w.cached_blocks() > 0;
  }));
}

TEST_F(PrefixCacheClusterTest, ARestartedDecodeWorkerAdvertisesAnEmptyCache) {
  std::string prompt = "System: Count the waves.";
  for (int i = 0; i < 10; ++i) prompt += " The sea rolls in and the sea rolls out again.";
  GenerateOutcome first = Turn(prompt);
  ASSERT_TRUE(first.status.ok());
  const std::string holder = first.last.timings().decode_worker();
  ASSERT_TRUE(AwaitRouterView(local_, holder, [](const v1::WorkerStatus& w) {
    return w.healthy() && w.cached_blocks() > 0;
  }));
  GenerateOutcome again = Turn(prompt);
  EXPECT_EQ(again.last.timings().decode_worker(), holder);
  EXPECT_GT(again.last.timings().decode_cached_tokens(), 0);

  // Kill the holder and start a new decode worker at its address: it registers again, and the
  // router forgets what the old one had cached.
  Proc* old = nullptr;
  for (Proc* d : decode_) {
    if (d->address == holder) old = d;
  }
  ASSERT_NE(old, nullptr);
  old->process->Signal(SIGKILL);
  ASSERT_TRUE(old->process->Wait(std::chrono::seconds(10)).ok());
  const std::string port = holder.substr(holder.rfind(':') + 1);
  absl::StatusOr<Proc*> restarted = local_.StartWorker("decode", {"--port", port});
  ASSERT_TRUE(restarted.ok()) << restarted.status();
  ASSERT_EQ((*restarted)->address, holder);
  EXPECT_TRUE(AwaitRouterView(local_, holder, [](const v1::WorkerStatus& w) {
    return w.healthy() && w.cached_blocks() == 0 && w.load().kv_blocks_free() ==
                                                        w.load().kv_blocks_total();
  }));
  // The prompt again: no decode worker holds it now; the output is the same.
  GenerateOutcome after = Turn(prompt);
  ASSERT_TRUE(after.status.ok());
  EXPECT_EQ(after.last.timings().decode_cached_tokens(), 0);
  EXPECT_EQ(after.text, first.text);
}

}  // namespace
}  // namespace baton
