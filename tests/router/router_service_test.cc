// A real Router on 127.0.0.1 with fake prefill and decode workers (real gRPC servers answering
// scripted tokens). The router tokenizes with the real default model; no forward pass runs.
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "baton/v1/router.grpc.pb.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "router/router_server.h"
#include "router/served_model.h"
#include "rpc/server_options.h"
#include "tests/router/fake_workers.h"
#include "tests/support/test_paths.h"

namespace baton::router {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::UnorderedElementsAreArray;
using testing::FakeDecodeWorker;
using testing::FakePrefillWorker;
using testing::FakeServer;
using testing::StartFakeServer;
using testing::WaitUntil;

struct GenerateResult {
  grpc::Status status;
  std::vector<v1::GenerateResponse> messages;
  std::string text;
  std::vector<int32_t> tokens;
  absl::Duration elapsed;
};

class RouterServiceTest : public testing::FakeWorkersTest {
 protected:
  void TearDown() override {
    if (router_ != nullptr) router_->Shutdown();
    router_.reset();
    for (FakeServer* s : {&prefill_server_, &decode_server_}) {
      if (s->server != nullptr) s->server->Shutdown(std::chrono::system_clock::now());
    }
  }

  RouterOptions DefaultOptions() {
    RouterOptions options;
    options.model_path = test_support::DefaultModelPath();
    options.prefill_workers = {prefill_server_.address()};
    options.decode_workers = {decode_server_.address()};
    options.heartbeat_interval = absl::Milliseconds(100);
    options.heartbeat_timeout = absl::Seconds(2);
    // A request with no worker to move to (the tests' one prefill worker failed it) gives up soon.
    options.requests.no_worker_wait = absl::Seconds(2);
    return options;
  }

  void StartRouter(RouterOptions options) {
    router_ = std::make_unique<Router>(std::move(options));
    absl::Status started = router_->Start();
    ASSERT_TRUE(started.ok()) << started;
    absl::StatusOr<std::shared_ptr<grpc::Channel>> channel =
        rpc::MakeChannel(router_->address(), {});
    ASSERT_TRUE(channel.ok());
    stub_ = v1::Router::NewStub(*channel);
  }
  void StartRouter() { StartRouter(DefaultOptions()); }

  // Tokens of `text` as the model would generate them (no BOS).
  static std::vector<int32_t> Tokens(const std::string& text) {
    return model_->tokenizer().Encode(text, {});
  }
  static int32_t Eos() { return model_->tokenizer().vocab().eos_id; }

  // Scripts the workers to "generate" `tokens`: the first from prefill, the rest from decode.
  void Script(const std::vector<int32_t>& tokens, bool hold_open = false) {
    prefill_->set_first_token(tokens.front());
    decode_->set_script({.tokens = std::vector<int32_t>(tokens.begin() + 1, tokens.end()),
                         .hold_open = hold_open});
  }

  static v1::GenerateRequest Prompt(const std::string& text) {
    v1::GenerateRequest r;
    r.set_prompt(text);
    return r;
  }

  GenerateResult Generate(const v1::GenerateRequest& request,
                          absl::Duration timeout = absl::Seconds(20),
                          const std::string& token = "") {
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
    if (!token.empty()) context.AddMetadata("authorization", "Bearer " + token);
    GenerateResult result;
    const absl::Time start = absl::Now();
    std::unique_ptr<grpc::ClientReader<v1::GenerateResponse>> reader =
        stub_->Generate(&context, request);
    v1::GenerateResponse message;
    while (reader->Read(&message)) {
      result.text += message.text();
      result.tokens.insert(result.tokens.end(), message.tokens().begin(), message.tokens().end());
      result.messages.push_back(message);
    }
    result.status = reader->Finish();
    result.elapsed = absl::Now() - start;
    return result;
  }

  std::unique_ptr<Router> router_;
  std::unique_ptr<v1::Router::Stub> stub_;
};


TEST_F(RouterServiceTest, HappyPathStreamsTheScriptedText) {
  StartRouter();
  std::vector<int32_t> generated = Tokens(" The quick brown fox jumps over the lazy dog.");
  const std::string expected = model_->tokenizer().Decode(generated);
  generated.push_back(Eos());
  Script(generated);

  const GenerateResult result = Generate(Prompt("Tell me about foxes."));
  ASSERT_TRUE(result.status.ok()) << result.status.error_message();
  EXPECT_EQ(result.text, expected);
  EXPECT_EQ(result.tokens, generated);
  ASSERT_GE(result.messages.size(), 2u);
  // The first token goes out alone, as soon as prefill returns it.
  EXPECT_THAT(result.messages[0].tokens(), ElementsAre(generated[0]));
  const std::string request_id = result.messages[0].request_id();
  EXPECT_FALSE(request_id.empty());
  for (const v1::GenerateResponse& m : result.messages) EXPECT_EQ(m.request_id(), request_id);

  const v1::GenerateResponse& last = result.messages.back();
  EXPECT_EQ(last.finish_reason(), v1::FINISH_REASON_STOP);
  const std::vector<int32_t> prompt = model_->tokenizer().Encode(
      "Tell me about foxes.",
      {.add_bos = model_->tokenizer().vocab().add_bos, .parse_special = true});
  EXPECT_EQ(last.usage().prompt_tokens(), static_cast<int32_t>(prompt.size()));
  EXPECT_EQ(last.usage().completion_tokens(), static_cast<int32_t>(generated.size()));
  EXPECT_EQ(last.timings().kv_bytes(), 12345);
  EXPECT_DOUBLE_EQ(last.timings().kv_transfer_seconds(), 0.25);
  EXPECT_EQ(last.timings().prefill_worker(), prefill_server_.address());
  EXPECT_EQ(last.timings().decode_worker(), decode_server_.address());
  EXPECT_GT(last.timings().e2e_seconds(), 0.0);
  EXPECT_LE(last.timings().ttft_seconds(), last.timings().e2e_seconds());
  EXPECT_LE(last.timings().queue_seconds(), last.timings().ttft_seconds());
  for (size_t i = 0; i + 1 < result.messages.size(); ++i) {
    EXPECT_EQ(result.messages[i].finish_reason(), v1::FINISH_REASON_UNSPECIFIED);
  }

  // What the workers were asked.
  ASSERT_EQ(decode_->reserves().size(), 1u);
  const v1::ReserveRequest reserve = decode_->reserves()[0];
  EXPECT_EQ(reserve.request_id(), request_id);
  EXPECT_EQ(reserve.n_prompt_tokens(), static_cast<int32_t>(prompt.size()));
  EXPECT_EQ(reserve.max_tokens(), 256);
  EXPECT_GT(reserve.lease_ms(), 0);
  EXPECT_EQ(reserve.model_fingerprint(), model_->fingerprint());
  ASSERT_EQ(prefill_->prefills().size(), 1u);
  const v1::PrefillRequest prefill = prefill_->prefills()[0];
  EXPECT_EQ(prefill.request_id(), request_id);
  EXPECT_EQ(std::vector<int32_t>(prefill.prompt_tokens().begin(), prefill.prompt_tokens().end()),
            prompt);
  EXPECT_EQ(prefill.destination().decode_address(), decode_server_.address());
  EXPECT_EQ(prefill.destination().reservation_id(), decode_->reservation_ids()[0]);
  EXPECT_EQ(prefill.destination().n_blocks(),
            (static_cast<int32_t>(prompt.size()) + 256 + 15) / 16);
  EXPECT_EQ(prefill.model_fingerprint(), model_->fingerprint());
  EXPECT_TRUE(prefill.sampling().has_seed());
  EXPECT_EQ(prefill.sampling().top_p(), 1.0f);
  EXPECT_EQ(prefill.sampling().max_tokens(), 256);
  ASSERT_EQ(decode_->decodes().size(), 1u);
  const v1::DecodeRequest decode = decode_->decodes()[0];
  EXPECT_EQ(decode.reservation_id(), decode_->reservation_ids()[0]);
  EXPECT_EQ(decode.first_token(), generated[0]);
  EXPECT_EQ(decode.prompt_tokens_size(), static_cast<int>(prompt.size()));
  EXPECT_EQ(decode.sampling().seed(), prefill.sampling().seed());
  // The decode worker ended the sequence itself: nothing to release.
  EXPECT_TRUE(decode_->releases().empty());

  // Unseeded requests get different seeds.
  Script(generated);
  ASSERT_TRUE(Generate(Prompt("Tell me about foxes.")).status.ok());
  ASSERT_EQ(prefill_->prefills().size(), 2u);
  EXPECT_NE(prefill_->prefills()[1].sampling().seed(), prefill.sampling().seed());
  EXPECT_EQ(router_->requests().active(), 0);
  EXPECT_EQ(router_->requests().finished_total(), 2);
}

TEST_F(RouterServiceTest, ChatAndPromptTokensAndClientRequestId) {
  StartRouter();
  std::vector<int32_t> generated = Tokens(" Four.");
  generated.push_back(Eos());
  Script(generated);
  v1::GenerateRequest chat;
  v1::ChatMessage* m = chat.mutable_chat()->add_messages();
  m->set_role("user");
  m->set_content("What is 2+2?");
  chat.set_request_id("my-request-1");
  chat.set_model(model_->id());
  GenerateResult result = Generate(chat);
  ASSERT_TRUE(result.status.ok()) << result.status.error_message();
  EXPECT_EQ(result.text, " Four.");
  EXPECT_EQ(result.messages[0].request_id(), "my-request-1");

  v1::GenerateRequest ids;
  ids.mutable_prompt_tokens()->add_ids(1);
  ids.mutable_prompt_tokens()->add_ids(2);
  ids.mutable_prompt_tokens()->add_ids(3);
  Script(generated);
  result = Generate(ids);
  ASSERT_TRUE(result.status.ok()) << result.status.error_message();
  EXPECT_EQ(result.messages.back().usage().prompt_tokens(), 3);
  EXPECT_THAT(prefill_->prefills().back().prompt_tokens(), ElementsAre(1, 2, 3));
}

TEST_F(RouterServiceTest, MaxTokensOneEndsAtTheFirstTokenAndReleases) {
  StartRouter();
  Script(Tokens(" Hello there"));
  v1::GenerateRequest request = Prompt("Hi");
  request.mutable_sampling()->set_max_tokens(1);
  const GenerateResult result = Generate(request);
  ASSERT_TRUE(result.status.ok()) << result.status.error_message();
  ASSERT_EQ(result.messages.size(), 1u);
  EXPECT_EQ(result.messages[0].finish_reason(), v1::FINISH_REASON_LENGTH);
  EXPECT_EQ(result.messages[0].usage().completion_tokens(), 1);
  EXPECT_TRUE(decode_->decodes().empty());
  EXPECT_THAT(decode_->releases(), ElementsAre(decode_->reservation_ids()[0]));
}

TEST_F(RouterServiceTest, ListModelsAndClusterStatus) {
  StartRouter();
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
  v1::ListModelsResponse models;
  ASSERT_TRUE(stub_->ListModels(&context, {}, &models).ok());
  ASSERT_EQ(models.models_size(), 1);
  EXPECT_EQ(models.models(0).id(), "SmolLM2-135M-Instruct.Q4_1");
  EXPECT_EQ(models.models(0).n_ctx(), model_->n_ctx());
  EXPECT_EQ(models.models(0).fingerprint(), model_->fingerprint());

  grpc::ClientContext status_context;
  status_context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
  v1::ClusterStatusResponse status;
  ASSERT_TRUE(stub_->ClusterStatus(&status_context, {}, &status).ok());
  ASSERT_EQ(status.workers_size(), 2);
  EXPECT_EQ(status.workers(0).role(), v1::WORKER_ROLE_PREFILL);
  EXPECT_EQ(status.workers(0).address(), prefill_server_.address());
  EXPECT_TRUE(status.workers(0).healthy());
  EXPECT_EQ(status.workers(1).role(), v1::WORKER_ROLE_DECODE);
  EXPECT_TRUE(status.workers(1).healthy());
  EXPECT_EQ(status.workers(1).load().kv_blocks_total(), 1000);
  EXPECT_EQ(status.queued_requests(), 0);
  EXPECT_EQ(status.active_requests(), 0);
}

TEST_F(RouterServiceTest, NoDecodeCapacityWithoutQueueIsResourceExhausted) {
  decode_->set_free_blocks(0);
  RouterOptions options = DefaultOptions();
  options.max_queued = 0;
  StartRouter(options);
  Script(Tokens(" Hi"));
  const GenerateResult result = Generate(Prompt("Hello"));
  EXPECT_EQ(result.status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(result.status.error_message(), HasSubstr("router queue full"));
  EXPECT_TRUE(decode_->reserves().empty());
  EXPECT_TRUE(prefill_->prefills().empty());
}

TEST_F(RouterServiceTest, QueuedRequestRunsOnceCapacityAppears) {
  decode_->set_free_blocks(0);
  StartRouter();
  std::vector<int32_t> generated = Tokens(" Patience.");
  generated.push_back(Eos());
  Script(generated);
  GenerateResult result;
  std::thread client([&] { result = Generate(Prompt("Wait for it")); });
  // The request waits in the router's queue...
  EXPECT_TRUE(WaitUntil([&] { return router_->requests().queued() == 1; }));
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
  v1::ClusterStatusResponse status;
  ASSERT_TRUE(stub_->ClusterStatus(&context, {}, &status).ok());
  EXPECT_EQ(status.queued_requests(), 1);
  EXPECT_TRUE(decode_->reserves().empty());
  // ...until the decode worker reports free blocks.
  decode_->set_free_blocks(1000);
  client.join();
  ASSERT_TRUE(result.status.ok()) << result.status.error_message();
  EXPECT_EQ(result.text, " Patience.");
  EXPECT_EQ(router_->requests().queued(), 0);
}

TEST_F(RouterServiceTest, QueuedRequestTimesOutAtItsDeadline) {
  decode_->set_free_blocks(0);
  StartRouter();
  const GenerateResult result = Generate(Prompt("Wait for it"), absl::Milliseconds(500));
  EXPECT_EQ(result.status.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  EXPECT_TRUE(WaitUntil([&] { return router_->requests().queued() == 0; }));
}

TEST_F(RouterServiceTest, NoDecodeWorkerAliveFailsFastWithUnavailable) {
  RouterOptions options = DefaultOptions();
  options.decode_workers = {};
  options.requests.no_worker_wait = absl::Seconds(1);
  StartRouter(options);
  // The client allows a minute: waiting it out would end in DEADLINE_EXCEEDED. The router gives
  // up once no decode worker has existed for 1 s.
  const GenerateResult result = Generate(Prompt("Anyone there?"), absl::Seconds(60));
  EXPECT_EQ(result.status.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_THAT(result.status.error_message(), HasSubstr("no healthy decode worker"));
  EXPECT_TRUE(WaitUntil([&] { return router_->requests().queued() == 0; }));
}

TEST_F(RouterServiceTest, NoPrefillWorkerAliveFailsAfterTheWaitAndReleases) {
  RouterOptions options = DefaultOptions();
  options.prefill_workers = {};
  options.requests.no_worker_wait = absl::Seconds(1);
  StartRouter(options);
  const GenerateResult result = Generate(Prompt("Anyone there?"), absl::Seconds(60));
  EXPECT_EQ(result.status.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_THAT(result.status.error_message(), HasSubstr("no healthy prefill worker"));
  EXPECT_LT(result.elapsed, absl::Seconds(30));
  ASSERT_EQ(decode_->reservation_ids().size(), 1u);
  EXPECT_THAT(decode_->releases(), ElementsAre(decode_->reservation_ids()[0]));
}

TEST_F(RouterServiceTest, APrefillWorkerThatComesBackWhileARequestWaitsServesIt) {
  RouterOptions options = DefaultOptions();
  options.prefill_workers = {};
  options.requests.no_worker_wait = absl::Seconds(30);
  StartRouter(options);
  Script({Eos()});
  GenerateResult result;
  std::thread client([&] { result = Generate(Prompt("Hi"), absl::Seconds(60)); });
  // The request reserves, then waits for a prefill worker (one restarting, say).
  ASSERT_TRUE(WaitUntil([&] { return decode_->reservation_ids().size() == 1; }));
  v1::ModelIdentity identity;
  identity.set_fingerprint(model_->fingerprint());
  ASSERT_TRUE(router_->registry()
                  .Register(v1::WORKER_ROLE_PREFILL, prefill_server_.address(), identity, {})
                  .ok());
  client.join();
  EXPECT_TRUE(result.status.ok()) << result.status.error_message();
  EXPECT_EQ(prefill_->prefills().size(), 1u);
}

TEST_F(RouterServiceTest, ConcurrentRequestsBeyondTheThreadsWaitAndAllComplete) {
  RouterOptions options = DefaultOptions();
  options.max_running = 2;
  options.max_queued = 16;
  StartRouter(options);
  std::vector<int32_t> generated = Tokens(" Same answer for everyone.");
  generated.push_back(Eos());
  Script(generated);
  std::vector<GenerateResult> results(8);
  std::vector<std::thread> clients;
  for (GenerateResult& r : results) {
    clients.emplace_back([&] { r = Generate(Prompt("Question")); });
  }
  for (std::thread& t : clients) t.join();
  for (const GenerateResult& r : results) {
    ASSERT_TRUE(r.status.ok()) << r.status.error_message();
    EXPECT_EQ(r.text, " Same answer for everyone.");
  }
  EXPECT_EQ(decode_->reserves().size(), 8u);
  EXPECT_EQ(router_->requests().finished_total(), 8);
}

TEST_F(RouterServiceTest, EveryThreadBusyAndNoQueueIsResourceExhausted) {
  RouterOptions options = DefaultOptions();
  options.max_running = 1;
  options.max_queued = 0;
  StartRouter(options);
  Script(Tokens(" busy busy busy"), /*hold_open=*/true);
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(20)));
  std::unique_ptr<grpc::ClientReader<v1::GenerateResponse>> reader =
      stub_->Generate(&context, Prompt("First"));
  ASSERT_TRUE(WaitUntil([&] { return decode_->decodes().size() == 1; }));
  const GenerateResult second = Generate(Prompt("Second"));
  EXPECT_EQ(second.status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(second.status.error_message(), HasSubstr("router queue full"));
  context.TryCancel();
  v1::GenerateResponse message;
  while (reader->Read(&message)) {
  }
  reader->Finish();
  EXPECT_TRUE(WaitUntil([&] { return decode_->releases().size() == 1; }));
}

TEST_F(RouterServiceTest, BadInputIsInvalidArgumentNamingTheProblem) {
  StartRouter();
  struct Case {
    v1::GenerateRequest request;
    grpc::StatusCode code;
    std::string message;
  };
  std::vector<Case> cases;
  cases.push_back({Prompt(""), grpc::StatusCode::INVALID_ARGUMENT, "prompt is empty"});
  // (Invalid UTF-8 cannot be sent here: protobuf refuses it in a string field before the router
  // sees the request. PrepareRequest's own check is in request_intake_test.)
  v1::GenerateRequest no_messages;
  no_messages.mutable_chat();
  cases.push_back({no_messages, grpc::StatusCode::INVALID_ARGUMENT, "chat has no messages"});
  v1::GenerateRequest too_long = Prompt("Hello");
  too_long.mutable_sampling()->set_max_tokens(model_->n_ctx() + 1);
  cases.push_back({too_long, grpc::StatusCode::INVALID_ARGUMENT,
                   absl::StrCat("exceeds the model's context of ", model_->n_ctx())});
  v1::GenerateRequest top_p = Prompt("Hello");
  top_p.mutable_sampling()->set_top_p(1.5f);
  cases.push_back({top_p, grpc::StatusCode::INVALID_ARGUMENT, "top_p"});
  v1::GenerateRequest penalty = Prompt("Hello");
  penalty.mutable_sampling()->set_presence_penalty(3.0f);
  cases.push_back({penalty, grpc::StatusCode::INVALID_ARGUMENT, "presence_penalty"});
  v1::GenerateRequest bad_id;
  bad_id.mutable_prompt_tokens()->add_ids(-1);
  cases.push_back({bad_id, grpc::StatusCode::INVALID_ARGUMENT, "prompt_tokens[0]"});
  v1::GenerateRequest other_model = Prompt("Hello");
  other_model.set_model("gpt-5");
  cases.push_back({other_model, grpc::StatusCode::NOT_FOUND, "gpt-5"});
  for (const Case& c : cases) {
    const GenerateResult result = Generate(c.request);
    EXPECT_EQ(result.status.error_code(), c.code) << c.message;
    EXPECT_THAT(result.status.error_message(), HasSubstr(c.message));
    EXPECT_TRUE(result.messages.empty());
  }
  // Nothing reached a worker.
  EXPECT_TRUE(decode_->reserves().empty());
  EXPECT_TRUE(prefill_->prefills().empty());
}

TEST_F(RouterServiceTest, PrefillUnavailableFailsTheRequestAndReleasesTheReservation) {
  StartRouter();
  prefill_->set_mode(FakePrefillWorker::Mode::kFail,
                     grpc::Status(grpc::StatusCode::UNAVAILABLE, "out of service"));
  const GenerateResult result = Generate(Prompt("Hello"));
  EXPECT_EQ(result.status.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_THAT(result.status.error_message(),
              HasSubstr(absl::StrCat("prefill worker ", prefill_server_.address(),
                                     " unavailable: out of service")));
  // The request tried to move to another pair (there is none) after reserving again: every
  // reservation it made is released.
  ASSERT_FALSE(decode_->reservation_ids().empty());
  EXPECT_THAT(decode_->releases(), UnorderedElementsAreArray(decode_->reservation_ids()));
  EXPECT_TRUE(decode_->decodes().empty());
}

TEST_F(RouterServiceTest, AFailedKvPushIsBlamedOnTheDecodeWorker) {
  RouterOptions options = DefaultOptions();
  options.requests.no_worker_wait = absl::Seconds(1);  // no other decode worker to move to
  StartRouter(options);
  prefill_->set_mode(FakePrefillWorker::Mode::kFailKvDestination,
                     grpc::Status(grpc::StatusCode::UNAVAILABLE, "push broke off"));
  const GenerateResult result = Generate(Prompt("Hello"));
  EXPECT_EQ(result.status.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_THAT(result.status.error_message(),
              HasSubstr(absl::StrCat("decode worker ", decode_server_.address(),
                                     " unavailable: push broke off")));
  // The prefill worker is not blamed: it stays healthy.
  for (const WorkerSnapshot& w : router_->registry().Snapshot()) {
    if (w.address == prefill_server_.address()) {
      EXPECT_TRUE(w.healthy);
    }
  }
  EXPECT_THAT(decode_->releases(), UnorderedElementsAreArray(decode_->reservation_ids()));
}

TEST_F(RouterServiceTest, PrefillWorkerDownFailsWithinTheDeadlineAndReleases) {
  // A worker that registered and then died: the registry still thinks it healthy (heartbeats every
  // 5 s here), so the request goes to it.
  FakeServer dead = StartFakeServer(prefill_.get());
  const std::string dead_address = dead.address();
  dead.server->Shutdown(std::chrono::system_clock::now());
  dead.server.reset();
  RouterOptions options = DefaultOptions();
  options.prefill_workers.clear();
  options.heartbeat_interval = absl::Seconds(5);
  options.heartbeat_timeout = absl::ZeroDuration();
  StartRouter(options);
  v1::ModelIdentity identity;
  identity.set_fingerprint(model_->fingerprint());
  identity.set_block_size(testing::kFakeBlockSize);
  absl::StatusOr<std::string> id =
      router_->registry().Register(v1::WORKER_ROLE_PREFILL, dead_address, identity, {});
  ASSERT_TRUE(id.ok()) << id.status();

  const GenerateResult result = Generate(Prompt("Hello"), absl::Seconds(10));
  EXPECT_EQ(result.status.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_THAT(result.status.error_message(),
              HasSubstr(absl::StrCat("prefill worker ", dead_address, " unavailable")));
  EXPECT_LT(result.elapsed, absl::Seconds(10));
  ASSERT_FALSE(decode_->reservation_ids().empty());
  EXPECT_THAT(decode_->releases(), UnorderedElementsAreArray(decode_->reservation_ids()));
  // The router stops sending requests to it until it reports again.
  bool healthy = true;
  for (const WorkerSnapshot& w : router_->registry().Snapshot()) {
    if (w.address == dead_address) healthy = w.healthy;
  }
  EXPECT_FALSE(healthy);
}

TEST_F(RouterServiceTest, DecodeWorkerFailingMidStreamIsUnavailable) {
  StartRouter();
  std::vector<int32_t> generated = Tokens(" one two three");
  prefill_->set_first_token(generated[0]);
  // Two tokens, then the stream breaks off without a finish reason.
  FakeDecodeWorker::Script script{.tokens = {generated[1], generated[2]}, .hold_open = false};
  script.finish_reason = v1::FINISH_REASON_UNSPECIFIED;
  script.end_status = grpc::Status(grpc::StatusCode::UNAVAILABLE, "decode worker crashed");
  decode_->set_script(script);
  const GenerateResult result = Generate(Prompt("Count"));
  EXPECT_EQ(result.status.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_THAT(result.status.error_message(),
              HasSubstr(absl::StrCat("decode worker ", decode_server_.address(), " unavailable")));
  EXPECT_THAT(decode_->releases(), ElementsAre(decode_->reservation_ids()[0]));
}

// Logprobs of one token: `logprob`, and the top tokens `top` at -1, -2, ...
v1::TokenLogprobs Logprobs(float logprob, const std::vector<int32_t>& top) {
  v1::TokenLogprobs lp;
  lp.set_logprob(logprob);
  for (size_t i = 0; i < top.size(); ++i) {
    lp.add_top_tokens(top[i]);
    lp.add_top_logprobs(-1.0f - static_cast<float>(i));
  }
  return lp;
}

// The workers' log-probabilities reach the client beside their tokens, the first token's from
// the prefill worker; the workers are asked for as many top tokens as the client.
TEST_F(RouterServiceTest, LogprobsTravelBesideTheirTokens) {
  StartRouter();
  const std::vector<int32_t> generated = Tokens(" one two three");
  ASSERT_EQ(generated.size(), 3u);
  prefill_->set_first_token(generated[0]);
  prefill_->set_first_token_logprobs(Logprobs(-0.5f, {generated[0]}));
  decode_->set_script({.tokens = {generated[1], generated[2]},
                       .logprobs = {Logprobs(-1.5f, {7}), Logprobs(-2.5f, {8})},
                       .finish_reason = v1::FINISH_REASON_LENGTH});
  v1::GenerateRequest request = Prompt("Count");
  request.mutable_sampling()->set_max_tokens(3);
  request.mutable_sampling()->set_logprobs(1);
  const GenerateResult result = Generate(request);
  ASSERT_TRUE(result.status.ok()) << result.status.error_message();
  std::vector<float> logprobs;
  std::vector<int32_t> top;
  for (const v1::GenerateResponse& m : result.messages) {
    ASSERT_EQ(m.logprobs_size(), m.tokens_size());
    for (const v1::TokenLogprobs& lp : m.logprobs()) {
      logprobs.push_back(lp.logprob());
      top.insert(top.end(), lp.top_tokens().begin(), lp.top_tokens().end());
    }
  }
  EXPECT_THAT(logprobs, ElementsAre(-0.5f, -1.5f, -2.5f));
  EXPECT_THAT(top, ElementsAre(generated[0], 7, 8));
  EXPECT_EQ(prefill_->prefills()[0].sampling().logprobs(), 1);
  EXPECT_EQ(decode_->decodes()[0].sampling().logprobs(), 1);
}

// A worker that leaves out the log-probabilities asked for, or sends a top token outside the
// vocabulary, fails the request as that worker's fault; nothing malformed reaches the client.
TEST_F(RouterServiceTest, MissingOrMalformedLogprobsFailTheRequestAsTheWorkersFault) {
  StartRouter();
  const std::vector<int32_t> generated = Tokens(" one two three");
  v1::GenerateRequest request = Prompt("Count");
  request.mutable_sampling()->set_max_tokens(3);
  request.mutable_sampling()->set_logprobs(1);

  prefill_->set_first_token(generated[0]);
  decode_->set_script({.tokens = {generated[1], generated[2]}});
  GenerateResult result = Generate(request);
  EXPECT_FALSE(result.status.ok());
  EXPECT_THAT(result.status.error_message(),
              AllOf(HasSubstr("prefill worker"),
                    HasSubstr("returned no log-probabilities for the first token")));

  prefill_->set_first_token_logprobs(Logprobs(-0.5f, {generated[0]}));
  result = Generate(request);  // the decode worker sends none
  EXPECT_FALSE(result.status.ok());
  EXPECT_THAT(result.status.error_message(),
              AllOf(HasSubstr("decode worker"),
                    HasSubstr("returned 0 log-probabilities for 1 tokens")));

  decode_->set_script({.tokens = {generated[1], generated[2]},
                       .logprobs = {Logprobs(-1.5f, {model_->n_vocab()}), Logprobs(-1.5f, {1})}});
  result = Generate(request);
  EXPECT_FALSE(result.status.ok());
  EXPECT_THAT(result.status.error_message(),
              HasSubstr(absl::StrCat("returned top token ", model_->n_vocab(),
                                     " outside the vocabulary")));

  decode_->set_script({.tokens = {generated[1], generated[2]},
                       .logprobs = {Logprobs(-1.5f, {1, 2}), Logprobs(-1.5f, {1})}});
  result = Generate(request);
  EXPECT_FALSE(result.status.ok());
  EXPECT_THAT(result.status.error_message(), HasSubstr("returned 2 top tokens"));
  for (const v1::GenerateResponse& m : result.messages) EXPECT_LE(m.logprobs_size(), 1);
  EXPECT_TRUE(WaitUntil([&] { return router_->requests().active() == 0; }));
}

// Prompt log-probabilities come on the first message, one per prompt token after the first; a
// prefill worker that sends the wrong number of them, or sends them unasked, fails the request as
// its own fault.
TEST_F(RouterServiceTest, PromptLogprobsComeOnTheFirstMessageAndAreChecked) {
  StartRouter();
  const std::vector<int32_t> generated = Tokens(" one two");
  prefill_->set_first_token(generated[0]);
  decode_->set_script({.tokens = {generated[1]}, .finish_reason = v1::FINISH_REASON_LENGTH});
  v1::GenerateRequest request = Prompt("Count to three");
  const size_t n_prompt = Tokens("Count to three").size();
  ASSERT_GE(n_prompt, 2u);
  request.mutable_sampling()->set_max_tokens(2);
  request.mutable_sampling()->set_prompt_logprobs(1);

  std::vector<v1::TokenLogprobs> prompt_logprobs;
  for (size_t i = 1; i < n_prompt; ++i) {
    prompt_logprobs.push_back(Logprobs(-0.25f * static_cast<float>(i), {generated[0]}));
  }
  prefill_->set_prompt_logprobs(prompt_logprobs);
  GenerateResult result = Generate(request);
  ASSERT_TRUE(result.status.ok()) << result.status.error_message();
  ASSERT_GE(result.messages.size(), 2u);
  ASSERT_EQ(result.messages[0].prompt_logprobs_size(), static_cast<int>(n_prompt - 1));
  for (size_t i = 1; i < n_prompt; ++i) {
    EXPECT_EQ(result.messages[0].prompt_logprobs(static_cast<int>(i - 1)).logprob(),
              -0.25f * static_cast<float>(i));
  }
  for (size_t m = 1; m < result.messages.size(); ++m) {
    EXPECT_EQ(result.messages[m].prompt_logprobs_size(), 0);
  }
  EXPECT_EQ(result.messages[0].logprobs_size(), 0);  // generated tokens' were not asked for
  EXPECT_EQ(prefill_->prefills().back().sampling().prompt_logprobs(), 1);

  prompt_logprobs.pop_back();
  prefill_->set_prompt_logprobs(prompt_logprobs);
  result = Generate(request);
  EXPECT_FALSE(result.status.ok());
  EXPECT_THAT(result.status.error_message(),
              AllOf(HasSubstr("prefill worker"),
                    HasSubstr(absl::StrCat("returned ", n_prompt - 2,
                                           " prompt log-probabilities for a prompt of ", n_prompt,
                                           " tokens"))));

  request.mutable_sampling()->clear_prompt_logprobs();
  result = Generate(request);
  EXPECT_FALSE(result.status.ok());
  EXPECT_THAT(result.status.error_message(),
              HasSubstr("returned prompt log-probabilities nobody asked for"));
  EXPECT_TRUE(WaitUntil([&] { return router_->requests().active() == 0; }));
}

TEST_F(RouterServiceTest, ClientCancelMidStreamCancelsDecodeAndReleases) {
  StartRouter();
  Script(Tokens(" and so on and so forth, forever and ever"), /*hold_open=*/true);
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(20)));
  std::unique_ptr<grpc::ClientReader<v1::GenerateResponse>> reader =
      stub_->Generate(&context, Prompt("Go on"));
  v1::GenerateResponse message;
  ASSERT_TRUE(reader->Read(&message));
  ASSERT_TRUE(WaitUntil([&] { return decode_->decodes().size() == 1; }));
  context.TryCancel();
  while (reader->Read(&message)) {
  }
  EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::CANCELLED);
  EXPECT_TRUE(WaitUntil([&] { return decode_->cancelled_streams() == 1; }));
  EXPECT_TRUE(WaitUntil([&] { return decode_->releases().size() == 1; }));
  EXPECT_THAT(decode_->releases(), ElementsAre(decode_->reservation_ids()[0]));
  EXPECT_TRUE(WaitUntil([&] { return router_->requests().active() == 0; }));
  EXPECT_EQ(router_->requests().failed_total(), 1);
}

TEST_F(RouterServiceTest, ClientCancelDuringPrefillCancelsPrefillAndReleases) {
  StartRouter();
  prefill_->set_mode(FakePrefillWorker::Mode::kHang);
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(20)));
  v1::GenerateRequest request = Prompt("Think hard");
  request.set_request_id("slow-1");
  std::unique_ptr<grpc::ClientReader<v1::GenerateResponse>> reader =
      stub_->Generate(&context, request);
  ASSERT_TRUE(WaitUntil([&] { return prefill_->prefills().size() == 1; }));
  context.TryCancel();
  v1::GenerateResponse message;
  EXPECT_FALSE(reader->Read(&message));
  EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::CANCELLED);
  EXPECT_TRUE(WaitUntil([&] { return prefill_->cancelled_calls() == 1; }));
  EXPECT_TRUE(WaitUntil([&] { return prefill_->cancel_prefills().size() == 1; }));
  EXPECT_THAT(prefill_->cancel_prefills(), ElementsAre("slow-1"));
  EXPECT_TRUE(WaitUntil([&] { return decode_->releases().size() == 1; }));
  EXPECT_THAT(decode_->releases(), ElementsAre(decode_->reservation_ids()[0]));
}

TEST_F(RouterServiceTest, StopStringCancelsDecodeAndReleases) {
  StartRouter();
  const std::vector<int32_t> generated = Tokens(" one two three four five six seven");
  const std::string full = model_->tokenizer().Decode(generated);
  Script(generated, /*hold_open=*/true);
  v1::GenerateRequest request = Prompt("Count");
  request.mutable_sampling()->add_stop("four");
  const GenerateResult result = Generate(request);
  ASSERT_TRUE(result.status.ok()) << result.status.error_message();
  EXPECT_EQ(result.text, full.substr(0, full.find("four")));
  EXPECT_EQ(result.messages.back().finish_reason(), v1::FINISH_REASON_STOP);
  EXPECT_TRUE(WaitUntil([&] { return decode_->cancelled_streams() == 1; }));
  EXPECT_TRUE(WaitUntil([&] { return decode_->releases().size() == 1; }));
  EXPECT_THAT(decode_->releases(), ElementsAre(decode_->reservation_ids()[0]));
  // The stop string's tokens count; those after it were never accepted.
  EXPECT_LT(result.messages.back().usage().completion_tokens(),
            static_cast<int32_t>(generated.size()));
}

TEST_F(RouterServiceTest, WrongTokenIsUnauthenticated) {
  RouterOptions options = DefaultOptions();
  options.server.auth_token = "s3cret";
  StartRouter(options);
  Script(Tokens(" ok"));
  EXPECT_EQ(Generate(Prompt("Hello")).status.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(Generate(Prompt("Hello"), absl::Seconds(10), "guess").status.error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  for (const char* token : {"", "guess"}) {
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
    if (*token) context.AddMetadata("authorization", absl::StrCat("Bearer ", token));
    v1::ListModelsResponse models;
    EXPECT_EQ(stub_->ListModels(&context, {}, &models).error_code(),
              grpc::StatusCode::UNAUTHENTICATED);
    grpc::ClientContext hb_context;
    hb_context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
    v1::HeartbeatResponse hb;
    EXPECT_EQ(stub_->Heartbeat(&hb_context, {}, &hb).error_code(),
              grpc::StatusCode::UNAUTHENTICATED);
  }
  EXPECT_TRUE(prefill_->prefills().empty());
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
  context.AddMetadata("authorization", "Bearer s3cret");
  v1::ListModelsResponse models;
  EXPECT_TRUE(stub_->ListModels(&context, {}, &models).ok());
}

TEST_F(RouterServiceTest, RegisterWorkerAndHeartbeat) {
  RouterOptions options = DefaultOptions();
  options.prefill_workers.clear();
  StartRouter(options);
  v1::RegisterWorkerRequest bad;
  bad.set_role(v1::WORKER_ROLE_PREFILL);
  bad.set_address(prefill_server_.address());
  bad.mutable_model()->set_fingerprint("not-the-model");
  {
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
    v1::RegisterWorkerResponse response;
    const grpc::Status s = stub_->RegisterWorker(&context, bad, &response);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
    EXPECT_THAT(s.error_message(), HasSubstr("not-the-model"));
    EXPECT_THAT(s.error_message(), HasSubstr(model_->fingerprint()));
  }
  v1::RegisterWorkerRequest good = bad;
  good.mutable_model()->set_fingerprint(model_->fingerprint());
  v1::RegisterWorkerResponse registered;
  {
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
    ASSERT_TRUE(stub_->RegisterWorker(&context, good, &registered).ok());
    EXPECT_FALSE(registered.worker_id().empty());
    EXPECT_EQ(registered.heartbeat_interval_ms(), 100);
  }
  for (const auto& [id, known] : std::vector<std::pair<std::string, bool>>{
           {registered.worker_id(), true}, {"worker-999", false}}) {
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
    v1::HeartbeatRequest beat;
    beat.set_worker_id(id);
    v1::HeartbeatResponse response;
    ASSERT_TRUE(stub_->Heartbeat(&context, beat, &response).ok());
    EXPECT_EQ(response.known(), known) << id;
  }
  // The registered prefill worker serves requests.
  std::vector<int32_t> generated = Tokens(" Registered.");
  generated.push_back(Eos());
  Script(generated);
  const GenerateResult result = Generate(Prompt("Hi"));
  ASSERT_TRUE(result.status.ok()) << result.status.error_message();
  EXPECT_EQ(result.text, " Registered.");
}

TEST_F(RouterServiceTest, ShutdownCancelsRequestsStillRunningAfterTheDrainTimeout) {
  RouterOptions options = DefaultOptions();
  options.drain_timeout = absl::Milliseconds(300);
  StartRouter(options);
  Script(Tokens(" and on and on and on"), /*hold_open=*/true);
  GenerateResult result;
  std::thread client([&] { result = Generate(Prompt("Hi")); });
  ASSERT_TRUE(WaitUntil([&] { return decode_->decodes().size() == 1; }));
  const absl::Time start = absl::Now();
  router_->Shutdown();
  router_->Wait();
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
  client.join();
  EXPECT_FALSE(result.status.ok());
  EXPECT_TRUE(WaitUntil([&] { return decode_->releases().size() == 1; }));
  EXPECT_TRUE(WaitUntil([&] { return decode_->cancelled_streams() == 1; }));
  // Nothing listens any more.
  EXPECT_EQ(Generate(Prompt("Hi"), absl::Seconds(2)).status.error_code(),
            grpc::StatusCode::UNAVAILABLE);
}

}  // namespace
}  // namespace baton::router
