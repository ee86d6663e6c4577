// Speculative decoding through the disaggregated cluster: a router, a prefill worker and a decode
// worker that speculates, as separate `baton` processes. The outputs must be in-process plain
// generation's, token for token, greedy and seeded, alone and batched.
#include <memory>
#include <thread>
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

// Output that copies its input: prompt lookup guesses most of it.
constexpr char kCopyPrompt[] =
    "<|im_start|>user\nRepeat this exactly: the quick brown fox jumps over the lazy dog, and the "
    "lazy dog sleeps in the warm sun all afternoon.<|im_end|>\n<|im_start|>assistant\n";
constexpr char kChatPrompt[] = "Write a short poem about the sea:\n";

class SpeculativeClusterTest : public testing::Test {
 protected:
  static void SetUpTestSuite() {
    absl::StatusOr<std::unique_ptr<engine::Model>> model =
        engine::Model::Load(test_support::DefaultModelPath());
    ASSERT_TRUE(model.ok()) << model.status();
    model_ = model->release();
  }
  static void TearDownTestSuite() {
    delete model_;
    model_ = nullptr;
  }

  void StartCluster(std::vector<std::string> speculative) {
    ASSERT_TRUE(cluster_.StartRouter().ok());
    ASSERT_TRUE(cluster_.StartWorker("prefill").ok());
    speculative.insert(speculative.end(), {"--num-speculative-tokens", "4"});
    absl::StatusOr<test_support::Proc*> d = cluster_.StartWorker("decode", speculative);
    ASSERT_TRUE(d.ok()) << d.status();
    decode_ = *d;
    ASSERT_TRUE(cluster_.WaitHealthy(2).ok());
  }

  GenerateOutcome Generate(const std::string& prompt, const engine::SamplingParams& params) {
    baton::v1::GenerateRequest request;
    request.set_prompt(prompt);
    *request.mutable_sampling() = rpc::SamplingParamsToProto(params);
    auto stub = cluster_.RouterStub();
    grpc::ClientContext context;
    cluster_.Prepare(context, std::chrono::seconds(120));
    return test_support::RunGenerate(*stub, context, request);
  }

  // In-process plain generation (no speculation) of the same prompt.
  static std::string Local(const std::string& prompt, const engine::SamplingParams& params) {
    absl::StatusOr<std::unique_ptr<engine::Generator>> generator =
        engine::Generator::Create(model_, {.n_threads = 1, .max_context = 1024});
    EXPECT_TRUE(generator.ok()) << generator.status();
    const engine::Tokenizer& tok = model_->tokenizer();
    std::string text;
    absl::StatusOr<engine::GenerationResult> result = (*generator)->Generate(
        tok.Encode(prompt, {.add_bos = tok.vocab().add_bos, .parse_special = true}), params,
        [&](std::string_view t) { text += t; });
    EXPECT_TRUE(result.ok()) << result.status();
    return text;
  }

  static std::vector<engine::SamplingParams> GreedyAndSeeded() {
    return {engine::SamplingParams{.temperature = 0, .max_tokens = 40},
            engine::SamplingParams{.temperature = 0.8f, .top_k = 40, .seed = 99,
                                   .max_tokens = 40}};
  }

  static engine::Model* model_;
  LocalCluster cluster_{{}, {}};
  test_support::Proc* decode_ = nullptr;
};

engine::Model* SpeculativeClusterTest::model_ = nullptr;

TEST_F(SpeculativeClusterTest, NgramOutputsEqualPlainGenerationAloneAndBatched) {
  // The token cost pinned low: the learned one follows this machine's step times and could turn
  // speculation off, and then the equalities below would hold without anything speculated.
  StartCluster({"--speculative", "ngram", "--speculative-token-cost", "0.05"});
  const std::vector<std::string> prompts = {kCopyPrompt, kChatPrompt, kCopyPrompt, kChatPrompt};
  for (const engine::SamplingParams& params : GreedyAndSeeded()) {
    SCOPED_TRACE(params.temperature);
    // Alone.
    GenerateOutcome copy = Generate(kCopyPrompt, params);
    ASSERT_TRUE(copy.status.ok()) << copy.status.error_message();
    EXPECT_EQ(copy.text, Local(kCopyPrompt, params));
    // Speculated and verified (greedy and seeded alike): the equality above is about something.
    EXPECT_GT(copy.last.timings().spec_draft_tokens(), 0) << "nothing was proposed";
    EXPECT_GT(copy.last.timings().spec_accepted_tokens(), 0) << "prompt lookup never paid";
    EXPECT_LE(copy.last.timings().spec_accepted_tokens(),
              copy.last.timings().spec_draft_tokens());
    // Opted out: the same text, nothing proposed.
    engine::SamplingParams plain = params;
    plain.speculative = false;
    GenerateOutcome opted_out = Generate(kCopyPrompt, plain);
    ASSERT_TRUE(opted_out.status.ok()) << opted_out.status.error_message();
    EXPECT_EQ(opted_out.text, copy.text);
    EXPECT_EQ(opted_out.last.timings().spec_draft_tokens(), 0);
    // Batched: all four at once in the decode batch.
    std::vector<GenerateOutcome> outcomes(prompts.size());
    std::vector<std::thread> threads;
    for (size_t i = 0; i < prompts.size(); ++i) {
      threads.emplace_back([&, i] { outcomes[i] = Generate(prompts[i], params); });
    }
    for (std::thread& t : threads) t.join();
    int64_t batched_accepted = 0;
    for (size_t i = 0; i < prompts.size(); ++i) {
      ASSERT_TRUE(outcomes[i].status.ok()) << outcomes[i].status.error_message();
      EXPECT_EQ(outcomes[i].text, Local(prompts[i], params)) << "request " << i;
      batched_accepted += outcomes[i].last.timings().spec_accepted_tokens();
    }
    EXPECT_GT(batched_accepted, 0) << "the batch speculated nothing";
  }
  EXPECT_EQ(cluster_.WaitEveryWorkerFree(), absl::OkStatus());
}

TEST_F(SpeculativeClusterTest, DraftModelOutputsEqualPlainGeneration) {
  // The served model as its own draft: greedy guesses are always right at T = 0. (A draft as
  // large as the target never pays, so the estimated cost would turn speculation off: the test
  // sets a cheap one.)
  StartCluster({"--speculative", "draft:" + test_support::DefaultModelPath(),
                "--speculative-token-cost", "0.1"});
  for (const engine::SamplingParams& params : GreedyAndSeeded()) {
    SCOPED_TRACE(params.temperature);
    GenerateOutcome chat = Generate(kChatPrompt, params);
    ASSERT_TRUE(chat.status.ok()) << chat.status.error_message();
    EXPECT_EQ(chat.text, Local(kChatPrompt, params));
    EXPECT_GT(chat.last.timings().spec_draft_tokens(), 0);
    EXPECT_GT(chat.last.timings().spec_accepted_tokens(), 0);
    if (params.temperature == 0) {
      EXPECT_EQ(chat.last.timings().spec_accepted_tokens(),
                chat.last.timings().spec_draft_tokens());
    }
  }
  EXPECT_EQ(cluster_.WaitEveryWorkerFree(), absl::OkStatus());
}

TEST_F(SpeculativeClusterTest, BadSpeculativeFlagsFailAtStartUp) {
  ASSERT_TRUE(cluster_.StartRouter().ok());
  for (const std::vector<std::string>& flags :
       {std::vector<std::string>{"--speculative", "medusa"},
        std::vector<std::string>{"--speculative", "draft:/nonexistent/draft.gguf"},
        std::vector<std::string>{"--speculative", "ngram", "--num-speculative-tokens", "0"}}) {
    absl::StatusOr<test_support::Proc*> d = cluster_.StartWorker("decode", flags);
    EXPECT_FALSE(d.ok()) << flags[1] << " was accepted";
  }
}

}  // namespace
}  // namespace baton
