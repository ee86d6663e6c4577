// Many users at once through a real cluster: every request completes or fails with a clear status,
// no token is lost or duplicated (seeded outputs equal their single-request outputs), and every KV
// block is free afterwards on every worker — also with client cancellations mixed in.
#include <atomic>
#include <memory>
#include <random>
#include <thread>
#include <utility>

#include "engine/generator.h"
#include "engine/model.h"
#include "gtest/gtest.h"
#include "rpc/sampling_params_proto.h"
#include "tests/integration/local_cluster.h"
#include "tests/support/test_paths.h"

namespace baton {
namespace {

constexpr int kRequests = 120;
constexpr int kMaxTokens = 12;

struct Job {
  std::string prompt;
  engine::SamplingParams params;
  bool cancel = false;       // the client goes away after its first message
  std::string expected;      // single-request output (in-process)
};

TEST(ManyStreamsTest, HundredsOfConcurrentStreamsWithCancellations) {
  test_support::LocalCluster cluster({}, {});
  ASSERT_TRUE(cluster.StartRouter({"--max-queued", "1024"}).ok());
  absl::StatusOr<test_support::Proc*> prefill = cluster.StartWorker("prefill");
  absl::StatusOr<test_support::Proc*> decode =
      cluster.StartWorker("decode", {"--kv-cache-memory", "256M", "--max-decode-batch", "128"});
  ASSERT_TRUE(prefill.ok() && decode.ok());
  ASSERT_TRUE(cluster.WaitHealthy(2).ok());

  const std::vector<std::string> prompts = {
      "The history of the printing press", "A recipe for bread:", "def add(a, b):",
      "Q: What is a prime number?\nA:", "Once upon a time", "The weather today is",
      "List three colors:", "In 1969, astronauts"};
  std::vector<Job> jobs(kRequests);
  std::mt19937 rng(2024);
  for (int i = 0; i < kRequests; ++i) {
    jobs[i].prompt = prompts[i % prompts.size()];
    jobs[i].params = {.temperature = 0.8f, .top_k = 50, .seed = static_cast<uint64_t>(1000 + i),
                      .max_tokens = kMaxTokens};
    jobs[i].cancel = rng() % 5 == 0;
  }
  // Expected outputs: each request alone, in-process.
  absl::StatusOr<std::unique_ptr<engine::Model>> model =
      engine::Model::Load(test_support::DefaultModelPath());
  ASSERT_TRUE(model.ok()) << model.status();
  absl::StatusOr<std::unique_ptr<engine::Generator>> created =
      engine::Generator::Create(model->get(), {.n_threads = 1, .max_context = 256});
  ASSERT_TRUE(created.ok()) << created.status();
  std::unique_ptr<engine::Generator> generator = *std::move(created);
  const engine::Tokenizer& tok = (*model)->tokenizer();
  for (Job& job : jobs) {
    if (job.cancel) continue;
    const std::vector<engine::TokenId> ids =
        tok.Encode(job.prompt, {.add_bos = tok.vocab().add_bos, .parse_special = true});
    ASSERT_TRUE(generator
                    ->Generate(ids, job.params,
                               [&](std::string_view t) { job.expected += t; })
                    .ok());
  }

  std::atomic<int> ok{0}, cancelled{0}, mismatched{0}, failed{0};
  std::vector<std::thread> clients;
  for (int i = 0; i < kRequests; ++i) {
    clients.emplace_back([&, i] {
      const Job& job = jobs[i];
      baton::v1::GenerateRequest request;
      request.set_prompt(job.prompt);
      *request.mutable_sampling() = rpc::SamplingParamsToProto(job.params);
      auto stub = cluster.RouterStub();
      grpc::ClientContext context;
      cluster.Prepare(context, std::chrono::seconds(180));
      auto reader = stub->Generate(&context, request);
      baton::v1::GenerateResponse response;
      std::string text;
      while (reader->Read(&response)) {
        text += response.text();
        if (job.cancel) {
          context.TryCancel();
          break;
        }
      }
      if (job.cancel) {
        while (reader->Read(&response)) {
        }
      }
      grpc::Status status = reader->Finish();
      if (job.cancel) {
        ++cancelled;
      } else if (!status.ok()) {
        ++failed;
        ADD_FAILURE() << "request " << i << ": " << status.error_code() << " "
                      << status.error_message();
      } else if (text != job.expected) {
        ++mismatched;
        ADD_FAILURE() << "request " << i << " differs from its single-request output:\n"
                      << text << "\nvs\n" << job.expected;
      } else {
        ++ok;
      }
    });
  }
  for (std::thread& t : clients) t.join();
  std::cout << ok << " identical to their single-request output, " << cancelled
            << " cancelled by the client, " << mismatched << " mismatched, " << failed
            << " failed\n";
  EXPECT_EQ(ok + cancelled, kRequests);
  // No KV block leaked, on the decode worker nor among the prefill worker's scratch blocks.
  EXPECT_EQ(cluster.WaitEveryWorkerFree(), absl::OkStatus());
}

}  // namespace
}  // namespace baton
