// Request migration: a decode worker that dies (SIGKILL) or stalls (SIGSTOP, past the router's
// --stall-timeout) mid-stream does not end the client's stream. The router re-prefills the prompt
// plus the tokens already streamed on another pair and the stream continues where it stopped,
// with exactly the tokens and text of an uninterrupted run (seeded sampling at temperature > 0).
// With --migration-limit 0 the stream fails with UNAVAILABLE naming the worker instead.
#include <signal.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/integration/local_cluster.h"

namespace baton {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using test_support::GenerateOutcome;
using test_support::LocalCluster;
using test_support::Proc;

v1::GenerateRequest SampledRequest() { return test_support::SampledStoryRequest(1234); }

// A router with one prefill worker and two decode workers.
struct Cluster {
  explicit Cluster(std::vector<std::string> router_flags) : local({}, {}) {
    EXPECT_TRUE(local.StartRouter(std::move(router_flags)).ok());
    absl::StatusOr<Proc*> p = local.StartWorker("prefill");
    absl::StatusOr<Proc*> d0 = local.StartWorker("decode");
    absl::StatusOr<Proc*> d1 = local.StartWorker("decode");
    EXPECT_TRUE(p.ok() && d0.ok() && d1.ok());
    if (!(p.ok() && d0.ok() && d1.ok())) return;
    decode = {*d0, *d1};
    ready = local.WaitHealthy(3).ok();
  }

  // The decode worker running a sequence now, polled for up to 10 s; null when none is.
  Proc* BusyDecodeWorker() {
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (std::chrono::steady_clock::now() < until) {
      for (Proc* worker : decode) {
        absl::StatusOr<v1::WorkerLoad> load = local.DecodeLoad(worker->address);
        if (load.ok() && load->running_sequences() > 0) return worker;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return nullptr;
  }

  LocalCluster local;
  std::vector<Proc*> decode;
  bool ready = false;
};

// Streams `request`, sending `signal` to the decode worker serving it once a few tokens came
// from it; the whole outcome, and which worker got the signal.
GenerateOutcome StreamAndSignal(Cluster& cluster, const v1::GenerateRequest& request, int signal,
                                Proc** signalled) {
  auto stub = cluster.local.RouterStub();
  grpc::ClientContext context;
  cluster.local.Prepare(context, std::chrono::seconds(300));
  std::unique_ptr<grpc::ClientReader<v1::GenerateResponse>> reader =
      stub->Generate(&context, request);
  GenerateOutcome outcome;
  v1::GenerateResponse message;
  *signalled = nullptr;
  while (reader->Read(&message)) {
    outcome.text += message.text();
    outcome.tokens.insert(outcome.tokens.end(), message.tokens().begin(), message.tokens().end());
    outcome.last = message;
    if (*signalled == nullptr && outcome.tokens.size() >= 4) {
      *signalled = cluster.BusyDecodeWorker();
      if (*signalled != nullptr) (*signalled)->process->Signal(signal);
    }
  }
  outcome.status = reader->Finish();
  return outcome;
}

GenerateOutcome Uninterrupted(Cluster& cluster, const v1::GenerateRequest& request) {
  auto stub = cluster.local.RouterStub();
  grpc::ClientContext context;
  cluster.local.Prepare(context, std::chrono::seconds(120));
  return test_support::RunGenerate(*stub, context, request);
}

// Streams `request`, killing the decode worker serving it once a few tokens came: the stream must
// go on elsewhere and give `reference`'s tokens and text.
void KillMidStreamAndExpectTheSameOutput(Cluster& cluster, const v1::GenerateRequest& request,
                                         const GenerateOutcome& reference,
                                         GenerateOutcome* migrated, Proc** killed) {
  *migrated = StreamAndSignal(cluster, request, SIGKILL, killed);
  ASSERT_NE(*killed, nullptr) << "no decode worker was running the request";
  ASSERT_TRUE(migrated->status.ok()) << migrated->status.error_message();
  EXPECT_EQ(migrated->tokens, reference.tokens);
  EXPECT_EQ(migrated->text, reference.text);
}

TEST(MigrationTest, KilledDecodeWorkerMidStreamContinuesOnAnotherWithIdenticalOutput) {
  Cluster cluster({});
  ASSERT_TRUE(cluster.ready);
  const v1::GenerateRequest request = SampledRequest();
  const GenerateOutcome reference = Uninterrupted(cluster, request);
  ASSERT_TRUE(reference.status.ok()) << reference.status.error_message();
  ASSERT_EQ(reference.tokens.size(), 120u);

  Proc* killed = nullptr;
  GenerateOutcome migrated;
  ASSERT_NO_FATAL_FAILURE(KillMidStreamAndExpectTheSameOutput(cluster, request, reference,
                                                              &migrated, &killed));
  EXPECT_EQ(migrated.last.finish_reason(), v1::FINISH_REASON_LENGTH);
  EXPECT_EQ(migrated.last.usage().completion_tokens(), 120);
  EXPECT_EQ(migrated.last.timings().migrations(), 1);
  EXPECT_NE(migrated.last.timings().decode_worker(), killed->address);
  // The prefill worker and the surviving decode worker (the killed one is left out).
  EXPECT_EQ(cluster.local.WaitEveryWorkerFree(), absl::OkStatus());
}

// Structured output over gRPC: a request constrained by a JSON schema moves with its grammar state
// rebuilt from the tokens it streamed (the new pair's prompt ends with them), so its output is the
// uninterrupted one, and JSON that follows the schema.
TEST(MigrationTest, ConstrainedRequestMovesWithItsGrammarStateAndIdenticalOutput) {
  Cluster cluster({});
  ASSERT_TRUE(cluster.ready);
  v1::GenerateRequest request = SampledRequest();
  request.mutable_sampling()->set_max_tokens(200);
  v1::OutputConstraint& constraint = *request.mutable_sampling()->mutable_constraint();
  constraint.set_json_schema(R"({"type": "object", "properties": {"story": {"type": "string",
      "minLength": 120, "maxLength": 240}}, "required": ["story"]})");
  constraint.set_strict(true);
  const GenerateOutcome reference = Uninterrupted(cluster, request);
  ASSERT_TRUE(reference.status.ok()) << reference.status.error_message();
  EXPECT_EQ(reference.last.finish_reason(), v1::FINISH_REASON_STOP);  // the JSON is complete
  const nlohmann::json story = nlohmann::json::parse(reference.text, nullptr, false);
  ASSERT_TRUE(story.is_object()) << reference.text;
  EXPECT_EQ(story.size(), 1u);
  EXPECT_TRUE(story["story"].is_string());

  Proc* killed = nullptr;
  GenerateOutcome migrated;
  ASSERT_NO_FATAL_FAILURE(KillMidStreamAndExpectTheSameOutput(cluster, request, reference,
                                                              &migrated, &killed));
  EXPECT_EQ(migrated.last.timings().migrations(), 1);
  EXPECT_EQ(cluster.local.WaitEveryWorkerFree(), absl::OkStatus());
}

TEST(MigrationTest, StalledDecodeWorkerLosesItsStreamAndFreesItsBlocks) {
  // Stalls are detected at 2 s, well before keepalive (about 10 s) would notice the frozen
  // process.
  Cluster cluster({"--stall-timeout", "2"});
  ASSERT_TRUE(cluster.ready);
  const v1::GenerateRequest request = SampledRequest();
  const GenerateOutcome reference = Uninterrupted(cluster, request);
  ASSERT_TRUE(reference.status.ok()) << reference.status.error_message();

  Proc* stalled = nullptr;
  const auto started = std::chrono::steady_clock::now();
  const GenerateOutcome migrated = StreamAndSignal(cluster, request, SIGSTOP, &stalled);
  const auto took = std::chrono::steady_clock::now() - started;
  ASSERT_NE(stalled, nullptr) << "no decode worker was running the request";
  stalled->process->Signal(SIGCONT);
  ASSERT_TRUE(migrated.status.ok()) << migrated.status.error_message();
  EXPECT_EQ(migrated.tokens, reference.tokens);
  EXPECT_EQ(migrated.text, reference.text);
  EXPECT_EQ(migrated.last.timings().migrations(), 1);
  EXPECT_NE(migrated.last.timings().decode_worker(), stalled->address);
  EXPECT_LT(took, std::chrono::seconds(60));
  // The stalled worker, resumed, sees its stream cancelled and frees the sequence.
  EXPECT_EQ(cluster.local.WaitEveryWorkerFree(std::chrono::seconds(30)), absl::OkStatus());
}

TEST(MigrationTest, FrozenPrefillWorkerMidPromptMovesTheRequestAndFreesEveryBlock) {
  // Two prefill workers that prefill in chunks of 64 tokens (so that a prompt's remaining chunks
  // show as queued while it computes), one decode worker that drops a KV push silent for 2 s.
  // No prefix caching: the second run of the prompt must compute it all again.
  LocalCluster local({}, {});
  ASSERT_TRUE(local.StartRouter().ok());
  absl::StatusOr<Proc*> p0 =
      local.StartWorker("prefill", {"--max-batch-tokens", "64", "--no-prefix-caching"});
  absl::StatusOr<Proc*> p1 =
      local.StartWorker("prefill", {"--max-batch-tokens", "64", "--no-prefix-caching"});
  absl::StatusOr<Proc*> decode =
      local.StartWorker("decode", {"--kv-stall-timeout", "2", "--no-prefix-caching"});
  ASSERT_TRUE(p0.ok() && p1.ok() && decode.ok());
  ASSERT_TRUE(local.WaitHealthy(3).ok());
  v1::GenerateRequest request = SampledRequest();
  std::string prompt;
  for (int i = 0; i < 60; ++i) prompt += "The lighthouse keeper counted the ships again. ";
  request.set_prompt(prompt);  // about 600 tokens: a prefill long enough to freeze in
  request.mutable_sampling()->set_max_tokens(16);
  auto stub = local.RouterStub();
  GenerateOutcome reference;
  {
    grpc::ClientContext context;
    local.Prepare(context, std::chrono::seconds(120));
    reference = test_support::RunGenerate(*stub, context, request);
  }
  ASSERT_TRUE(reference.status.ok()) << reference.status.error_message();

  // Freeze whichever prefill worker takes the request, while it computes.
  std::atomic<Proc*> frozen = nullptr;
  std::thread freezer([&] {
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (frozen.load() == nullptr && std::chrono::steady_clock::now() < until) {
      for (Proc* worker : {*p0, *p1}) {
        auto prefill_stub = local.PrefillStub(worker->address);
        grpc::ClientContext context;
        local.Prepare(context, std::chrono::seconds(2));
        v1::StatusResponse status;
        if (prefill_stub->Status(&context, v1::StatusRequest(), &status).ok() &&
            status.load().queued_prompt_tokens() > 0) {
          worker->process->Signal(SIGSTOP);
          frozen = worker;
          break;
        }
      }
    }
  });
  GenerateOutcome moved;
  {
    grpc::ClientContext context;
    local.Prepare(context, std::chrono::seconds(120));
    moved = test_support::RunGenerate(*stub, context, request);
  }
  freezer.join();
  ASSERT_NE(frozen.load(), nullptr) << "no prefill worker was seen computing the prompt";
  frozen.load()->process->Signal(SIGCONT);
  ASSERT_TRUE(moved.status.ok()) << moved.status.error_message();
  EXPECT_EQ(moved.tokens, reference.tokens);
  EXPECT_EQ(moved.text, reference.text);
  EXPECT_EQ(moved.last.timings().migrations(), 1);
  EXPECT_NE(moved.last.timings().prefill_worker(), frozen.load()->address);
  // The frozen worker's push was dropped by the decode worker (or never began): every block
  // there is free, and the resumed prefill worker frees its own, as does the one that took over.
  EXPECT_EQ(local.WaitEveryWorkerFree(std::chrono::seconds(30)), absl::OkStatus());
}

TEST(MigrationTest, WithoutMigrationAKilledDecodeWorkerFailsTheStreamNamingIt) {
  Cluster cluster({"--migration-limit", "0"});
  ASSERT_TRUE(cluster.ready);
  Proc* killed = nullptr;
  const GenerateOutcome outcome = StreamAndSignal(cluster, SampledRequest(), SIGKILL, &killed);
  ASSERT_NE(killed, nullptr) << "no decode worker was running the request";
  EXPECT_EQ(outcome.status.error_code(), grpc::StatusCode::UNAVAILABLE)
      << outcome.status.error_message();
  EXPECT_THAT(outcome.status.error_message(), HasSubstr(killed->address));
  EXPECT_LT(outcome.tokens.size(), 120u);
  EXPECT_EQ(cluster.local.WaitEveryWorkerFree(), absl::OkStatus());
}

TEST(MigrationTest, WithNoOtherPairTheStreamFailsWithTheWorkersError) {
  // One decode worker only: nowhere to move to. The router waits --no-worker-timeout for one to
  // appear, then reports the first failure.
  LocalCluster local({}, {});
  ASSERT_TRUE(local.StartRouter({"--no-worker-timeout", "1"}).ok());
  absl::StatusOr<Proc*> prefill = local.StartWorker("prefill");
  absl::StatusOr<Proc*> decode = local.StartWorker("decode");
  ASSERT_TRUE(prefill.ok() && decode.ok());
  ASSERT_TRUE(local.WaitHealthy(2).ok());
  auto stub = local.RouterStub();
  grpc::ClientContext context;
  local.Prepare(context, std::chrono::seconds(300));
  std::unique_ptr<grpc::ClientReader<v1::GenerateResponse>> reader =
      stub->Generate(&context, SampledRequest());
  v1::GenerateResponse message;
  ASSERT_TRUE(reader->Read(&message));
  ASSERT_TRUE(reader->Read(&message));  // a token from the decode worker: it is streaming
  (*decode)->process->Signal(SIGKILL);
  while (reader->Read(&message)) {
  }
  const grpc::Status status = reader->Finish();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAVAILABLE) << status.error_message();
  EXPECT_THAT(status.error_message(), HasSubstr((*decode)->address));
  EXPECT_THAT(status.error_message(), HasSubstr("no other worker pair"));
  EXPECT_THAT(status.error_message(), Not(HasSubstr("DEADLINE")));
  EXPECT_EQ(local.WaitEveryWorkerFree(), absl::OkStatus());  // the prefill worker
}

}  // namespace
}  // namespace baton
