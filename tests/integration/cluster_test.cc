// The disaggregated cluster as users run it: a router, prefill and decode workers as separate
// `baton` processes on 127.0.0.1, talked to over gRPC.
#include <signal.h>

#include <memory>
#include <set>
#include <string>
#include <thread>
#include <utility>

#include "engine/generator.h"
#include "engine/model.h"
#include "engine/prefix_cache.h"
#include "engine/synthetic_model.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kvtransfer/kv_push_spec.h"
#include "rpc/sampling_params_proto.h"
#include "tests/integration/local_cluster.h"
#include "tests/support/temp_path.h"
#include "tests/support/test_paths.h"

namespace baton {
namespace {

using test_support::GenerateOutcome;
using test_support::LocalCluster;
using testing::HasSubstr;

class ClusterTest : public testing::Test {
 protected:
  void StartCluster(int n_prefill = 1, std::vector<std::string> prefill_args = {}) {
    ASSERT_TRUE(cluster_.StartRouter().ok());
    for (int i = 0; i < n_prefill; ++i) {
      absl::StatusOr<test_support::Proc*> p = cluster_.StartWorker("prefill", prefill_args);
      ASSERT_TRUE(p.ok()) << p.status();
      prefill_.push_back(*p);
    }
    absl::StatusOr<test_support::Proc*> d = cluster_.StartWorker("decode");
    ASSERT_TRUE(d.ok()) << d.status();
    decode_ = *d;
    ASSERT_TRUE(cluster_.WaitHealthy(n_prefill + 1).ok());
  }

  static baton::v1::GenerateRequest Request(const std::string& prompt,
                                            const engine::SamplingParams& params) {
    baton::v1::GenerateRequest request;
    request.set_prompt(prompt);
    *request.mutable_sampling() = rpc::SamplingParamsToProto(params);
    return request;
  }

  GenerateOutcome Generate(const baton::v1::GenerateRequest& request,
                           std::chrono::milliseconds timeout = std::chrono::seconds(120)) {
    auto stub = cluster_.RouterStub();
    grpc::ClientContext context;
    cluster_.Prepare(context, timeout);
    return test_support::RunGenerate(*stub, context, request);
  }

  // For every prompt, greedy and seeded: the cluster's output equals in-process generation, and
  // the hand-off carries exactly the blocks that hold the prompt, every layer, but those the
  // decode worker had cached: the seeded run repeats the greedy run's prompt, so it hits the
  // decode worker's prefix cache (the whole prompt but its last token, in whole blocks) and its
  // output must not change for that.
  // A windowed layer's hand-off is only the blocks its window still sees (kv_push_spec.h).
  void ExpectOutputsEqualInProcess(const std::vector<std::string>& prompts,
                                   const std::string& model_path = test_support::DefaultModelPath()) {
    absl::StatusOr<std::unique_ptr<engine::Model>> model = engine::Model::Load(model_path);
    ASSERT_TRUE(model.ok()) << model.status();
    absl::StatusOr<std::unique_ptr<engine::Generator>> created =
        engine::Generator::Create(model->get(), {.n_threads = 1, .max_context = 1024});
    ASSERT_TRUE(created.ok()) << created.status();
    std::unique_ptr<engine::Generator> generator = *std::move(created);
    const engine::Tokenizer& tok = (*model)->tokenizer();
    const engine::ModelConfig& config = (*model)->config();
    for (const std::string& prompt : prompts) {
      for (engine::SamplingParams params :
           {engine::SamplingParams{.temperature = 0, .max_tokens = 24},
            engine::SamplingParams{.temperature = 0.9f, .top_k = 40, .seed = 1234,
                                   .max_tokens = 24}}) {
        GenerateOutcome remote = Generate(Request(prompt, params));
        ASSERT_TRUE(remote.status.ok()) << remote.status.error_message();
        const std::vector<engine::TokenId> ids =
            tok.Encode(prompt, {.add_bos = tok.vocab().add_bos, .parse_special = true});
        std::string local_text;
        absl::StatusOr<engine::GenerationResult> local =
            generator->Generate(ids, params, [&](std::string_view t) { local_text += t; });
        ASSERT_TRUE(local.ok()) << local.status();
        EXPECT_EQ(remote.text, local_text) << prompt << " T=" << params.temperature;
        EXPECT_EQ(remote.last.usage().prompt_tokens(), static_cast<int>(ids.size()));
        EXPECT_EQ(remote.last.usage().completion_tokens(),
                  static_cast<int>(local->output_tokens.size()));
        const int32_t n_prompt = static_cast<int32_t>(ids.size());
        const int32_t decode_cached = remote.last.timings().decode_cached_tokens();
        EXPECT_EQ(decode_cached, params.temperature > 0 ? engine::MaxCachedTokens(n_prompt, 16) : 0)
            << prompt << " T=" << params.temperature;
        kvtransfer::KvPushSpec spec;
        spec.n_layer = config.n_layer;
        spec.kv_dim = config.kv_dim();
        spec.kv_planes = config.kv_planes();
        spec.block_size = 16;
        spec.n_tokens = n_prompt;
        spec.first_block = decode_cached / 16;
        for (const engine::LayerSpec& layer : config.layers) {
          spec.layer_windows.push_back(layer.attention.window);
        }
        EXPECT_EQ(remote.last.timings().kv_bytes(), spec.total_bytes());
        EXPECT_EQ(remote.last.timings().kv_transport(), "grpc");
        // The router saw the prefill worker's kv-sending stage before the KV was received.
        EXPECT_GT(remote.last.timings().kv_tail_seconds(), 0.0);
        EXPECT_LT(remote.last.timings().kv_tail_seconds(), remote.last.timings().ttft_seconds());
        kvtransfer::KvPushSpec every_block = spec;
        every_block.layer_windows.clear();
        EXPECT_GE(every_block.total_bytes(),
                  static_cast<int64_t>(n_prompt - decode_cached) * config.kv_bytes_per_token());
      }
    }
    EXPECT_EQ(cluster_.WaitEveryWorkerFree(), absl::OkStatus());
  }

  LocalCluster cluster_{{}, {}};
  std::vector<test_support::Proc*> prefill_;
  test_support::Proc* decode_ = nullptr;
};

TEST_F(ClusterTest, OutputsEqualInProcessGenerationAndHandOffIsThePromptKv) {
  StartCluster();
  ExpectOutputsEqualInProcess({"The capital of France is", "Write a short poem about the sea:\n",
                               "def fibonacci(n):"});
}

// A colocated worker (role both) beside a decode-only worker: the router pairs the colocated
// worker's prefill with either decode worker (round robin), and the KV goes in-process to the
// worker itself or over gRPC to the other, with the same outputs.
TEST_F(ClusterTest, AColocatedWorkersPrefillFeedsItselfAndAnotherDecodeWorker) {
  ASSERT_TRUE(cluster_.StartRouter({"--policy", "round-robin"}).ok());
  ASSERT_TRUE(cluster_.StartWorker("both").ok());
  ASSERT_TRUE(cluster_.StartWorker("decode").ok());
  ASSERT_TRUE(cluster_.WaitHealthy(2).ok());
  absl::StatusOr<std::unique_ptr<engine::Model>> model =
      engine::Model::Load(test_support::DefaultModelPath());
  ASSERT_TRUE(model.ok()) << model.status();
  absl::StatusOr<std::unique_ptr<engine::Generator>> generator =
      engine::Generator::Create(model->get(), {.n_threads = 1, .max_context = 1024});
  ASSERT_TRUE(generator.ok()) << generator.status();
  const engine::Tokenizer& tok = (*model)->tokenizer();
  std::set<std::string> transports;
  const engine::SamplingParams params{.temperature = 0, .max_tokens = 12};
  for (const std::string prompt : {"The capital of France is", "def fibonacci(n):",
                                   "Once upon a time", "The sea is"}) {
    GenerateOutcome remote = Generate(Request(prompt, params));
    ASSERT_TRUE(remote.status.ok()) << remote.status.error_message();
    transports.insert(remote.last.timings().kv_transport());
    std::string local_text;
    absl::StatusOr<engine::GenerationResult> local = (*generator)->Generate(
        tok.Encode(prompt, {.add_bos = tok.vocab().add_bos, .parse_special = true}), params,
        [&](std::string_view t) { local_text += t; });
    ASSERT_TRUE(local.ok()) << local.status();
    EXPECT_EQ(remote.text, local_text) << prompt;
  }
  EXPECT_EQ(transports, (std::set<std::string>{"grpc", "in_process"}));
  EXPECT_EQ(cluster_.WaitEveryWorkerFree(), absl::OkStatus());
}

TEST_F(ClusterTest, LongPromptsPrefilledInChunksGiveTheSameOutputs) {
  // A budget of 40 tokens: chunks of 32 (two 16-token blocks), each pushed as it is done.
  StartCluster(1, {"--max-batch-tokens", "40"});
  std::string long_prompt = "Here is a list of the planets of the solar system and a fact about each:";
  for (const char* planet : {" Mercury", " Venus", " Earth", " Mars", " Jupiter", " Saturn"}) {
    long_prompt += planet;
    long_prompt += " is a planet that orbits the Sun.";
  }
  ExpectOutputsEqualInProcess({long_prompt, "A prompt shorter than one chunk"});
}

// Gemma 3 270M: 15 of its 18 layers see the last 512 tokens only. A prompt past the window,
// prefilled in chunks: each local layer's hand-off is its window's blocks, the decode worker's
// cache lets go of the blocks the window passes as it decodes, and the output is the in-process
// output token for token (that of a cache that keeps every block); the repeated prompt hits the
// decode worker's prefix cache, whose local layers hold only the window before the hit.
TEST_F(ClusterTest, SlidingWindowLayersHandOffOnlyTheirWindow) {
  const std::string gemma = test_support::SourcePath("models/gemma-3-270m-q4_k_m.gguf");
  cluster_.set_model(gemma);
  StartCluster(1, {"--max-batch-tokens", "256"});
  std::string long_prompt = "A story, told slowly:";
  for (int i = 0; i < 45; ++i) {  // about 700 tokens
    long_prompt += " Day " + std::to_string(i) + ", the keeper lit the lamp and watched the sea.";
  }
  ExpectOutputsEqualInProcess({long_prompt}, gemma);
}

// deepseek2's latent attention: the cache holds one latent row per token and layer (K alone),
// and the hand-off ships exactly those bytes; the output is the in-process output.
TEST_F(ClusterTest, LatentAttentionHandsOffOneLatentPerToken) {
  absl::StatusOr<engine::SyntheticModelOptions> options =
      engine::SyntheticShape("tiny-deepseek2");
  ASSERT_TRUE(options.ok());
  const std::string path = test_support::TempPath("cluster-deepseek2.gguf");
  ASSERT_TRUE(engine::WriteSyntheticModel(path, *options).ok());
  cluster_.set_model(path);
  StartCluster();
  ExpectOutputsEqualInProcess({"The keeper lit the lamp and watched the sea, night after night."},
                              path);
}

TEST_F(ClusterTest, CancelledRequestFreesEveryBlock) {
  StartCluster();
  auto stub = cluster_.RouterStub();
  grpc::ClientContext context;
  cluster_.Prepare(context);
  auto reader = stub->Generate(
      &context, Request("Tell me a long story.",
                        {.temperature = 0.7f, .max_tokens = 400, .ignore_eos = true}));
  baton::v1::GenerateResponse response;
  int messages = 0;
  while (messages < 3 && reader->Read(&response)) ++messages;
  ASSERT_EQ(messages, 3);
  absl::StatusOr<baton::v1::WorkerLoad> busy = cluster_.DecodeLoad(decode_->address);
  ASSERT_TRUE(busy.ok());
  EXPECT_LT(busy->kv_blocks_free(), busy->kv_blocks_total());
  context.TryCancel();
  while (reader->Read(&response)) {
  }
  EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::CANCELLED);
  EXPECT_EQ(cluster_.WaitEveryWorkerFree(), absl::OkStatus());
}

TEST_F(ClusterTest, ExpiredReservationIsFreed) {
  StartCluster();
  auto stub = cluster_.DecodeStub(decode_->address);
  baton::v1::StatusResponse status;
  {
    grpc::ClientContext context;
    cluster_.Prepare(context);
    ASSERT_TRUE(stub->Status(&context, {}, &status).ok());
  }
  baton::v1::ReserveRequest reserve;
  reserve.set_request_id("lease-test");
  reserve.set_n_prompt_tokens(100);
  reserve.set_max_tokens(100);
  reserve.set_lease_ms(300);
  reserve.set_model_fingerprint(status.model().fingerprint());
  baton::v1::ReserveResponse reserved;
  grpc::ClientContext context;
  cluster_.Prepare(context);
  ASSERT_TRUE(stub->Reserve(&context, reserve, &reserved).ok());
  EXPECT_GT(reserved.n_blocks(), 0);
  absl::StatusOr<baton::v1::WorkerLoad> load = cluster_.DecodeLoad(decode_->address);
  ASSERT_TRUE(load.ok());
  EXPECT_EQ(load->kv_blocks_free(), load->kv_blocks_total() - reserved.n_blocks());
  EXPECT_EQ(cluster_.WaitEveryWorkerFree(std::chrono::seconds(5)), absl::OkStatus());
}

TEST_F(ClusterTest, BadInputIsRejectedAndTheClusterKeepsServing) {
  StartCluster();
  // Router: empty prompt, invalid UTF-8, over-long prompt, bad sampling value.
  GenerateOutcome empty = Generate(Request("", {}));
  EXPECT_EQ(empty.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  GenerateOutcome invalid = Generate(Request("abc\xff\xfe", {}));
  EXPECT_EQ(invalid.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  std::string huge;
  for (int i = 0; i < 9000; ++i) huge += " word";
  GenerateOutcome too_long = Generate(Request(huge, {.max_tokens = 16}));
  EXPECT_EQ(too_long.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  baton::v1::GenerateRequest bad_top_p = Request("hello", {});
  bad_top_p.mutable_sampling()->set_top_p(1.5f);
  GenerateOutcome bad = Generate(bad_top_p);
  EXPECT_EQ(bad.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(bad.status.error_message(), HasSubstr("top_p"));
  baton::v1::GenerateRequest bad_regex = Request("hello", {});
  bad_regex.mutable_sampling()->mutable_constraint()->set_regex("(unclosed");
  GenerateOutcome regex = Generate(bad_regex);
  EXPECT_EQ(regex.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(regex.status.error_message(), HasSubstr("output constraint regex does not compile"));

  // Decode worker: unknown reservation; a KV push with a wrong fingerprint; block ids out of range.
  auto decode = cluster_.DecodeStub(decode_->address);
  {
    baton::v1::DecodeRequest request;
    request.set_reservation_id("no-such-reservation");
    request.add_prompt_tokens(1);
    request.set_first_token(2);
    grpc::ClientContext context;
    cluster_.Prepare(context);
    auto reader = decode->Decode(&context, request);
    baton::v1::DecodeResponse response;
    while (reader->Read(&response)) {
    }
    EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::NOT_FOUND);
  }
  // Prefill worker: token ids out of range.
  {
    auto prefill = cluster_.PrefillStub(prefill_[0]->address);
    baton::v1::PrefillRequest request;
    request.add_prompt_tokens(1 << 30);
    request.mutable_destination()->set_decode_address(decode_->address);
    request.mutable_destination()->set_reservation_id("x");
    baton::v1::StatusResponse st;
    grpc::ClientContext sc;
    cluster_.Prepare(sc);
    ASSERT_TRUE(prefill->Status(&sc, {}, &st).ok());
    request.set_model_fingerprint(st.model().fingerprint());
    baton::v1::PrefillResponse response;
    grpc::ClientContext context;
    cluster_.Prepare(context);
    grpc::Status status = prefill->Prefill(&context, request, &response);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(status.error_message(), HasSubstr("prompt_tokens[0]"));
  }
  // Still serving.
  GenerateOutcome ok = Generate(Request("Hello", {.temperature = 0, .max_tokens = 4}));
  EXPECT_TRUE(ok.status.ok()) << ok.status.error_message();
  EXPECT_EQ(cluster_.WaitEveryWorkerFree(), absl::OkStatus());
}

TEST_F(ClusterTest, OversizedMessageIsRejected) {
  ASSERT_TRUE(cluster_.StartRouter({"--max-message-bytes", "65536"}).ok());
  std::string big(100000, 'a');
  GenerateOutcome outcome = Generate(Request(big, {}));
  EXPECT_EQ(outcome.status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
}

TEST_F(ClusterTest, PrefillWorkerKilledMidRequestFailsItAndLaterRequestsUseTheSurvivor) {
  StartCluster(/*n_prefill=*/1);
  // A long prompt keeps the only prefill worker busy for a while.
  std::string prompt;
  for (int i = 0; i < 300; ++i) prompt += "The quick brown fox jumps over the lazy dog. ";
  std::thread killer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    prefill_[0]->process->Signal(SIGKILL);
  });
  const auto start = std::chrono::steady_clock::now();
  GenerateOutcome doomed = Generate(Request(prompt, {.temperature = 0, .max_tokens = 8}),
                                    std::chrono::seconds(60));
  killer.join();
  EXPECT_EQ(doomed.status.error_code(), grpc::StatusCode::UNAVAILABLE)
      << doomed.status.error_message();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(60));
  EXPECT_EQ(cluster_.WaitEveryWorkerFree(), absl::OkStatus());

  absl::StatusOr<test_support::Proc*> survivor = cluster_.StartWorker("prefill");
  ASSERT_TRUE(survivor.ok());
  std::this_thread::sleep_for(std::chrono::seconds(1));  // the dead worker misses heartbeats
  for (int i = 0; i < 3; ++i) {
    GenerateOutcome later = Generate(Request("Hello there", {.temperature = 0, .max_tokens = 4}));
    ASSERT_TRUE(later.status.ok()) << later.status.error_message();
    EXPECT_EQ(later.last.timings().prefill_worker(), (*survivor)->address);
  }
}

TEST_F(ClusterTest, DecodeWorkerKilledEndsStreamsWithAnError) {
  StartCluster();
  auto stub = cluster_.RouterStub();
  grpc::ClientContext context;
  cluster_.Prepare(context, std::chrono::seconds(60));
  auto reader = stub->Generate(
      &context, Request("Count to one thousand:", {.temperature = 0, .max_tokens = 2000,
                                                    .ignore_eos = true}));
  baton::v1::GenerateResponse response;
  ASSERT_TRUE(reader->Read(&response));
  const auto start = std::chrono::steady_clock::now();
  decode_->process->Signal(SIGKILL);
  while (reader->Read(&response)) {
  }
  grpc::Status status = reader->Finish();
  EXPECT_FALSE(status.ok());
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAVAILABLE) << status.error_message();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(30));
}

}  // namespace
}  // namespace baton
