// `bench serve --phases` end to end against a stand-in router: the requests go out phase after
// phase with each phase's lengths, and the report has each phase's metrics.
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "bench/serve_bench.h"
#include "gtest/gtest.h"
#include "httplib.h"
#include "nlohmann/json.hpp"
#include "tests/support/http_server_thread.h"

namespace baton::bench {
namespace {

// Answers each streamed completion with max_tokens one-word chunks and a usage chunk that counts
// one prompt token per word; records every prompt's length in words, in arrival order.
class WordCountingRouter {
 public:
  WordCountingRouter() {
    server_.Post(
        "/v1/completions", [this](const httplib::Request& request, httplib::Response& response) {
          const nlohmann::json body = nlohmann::json::parse(request.body);
          const std::string prompt = body.value("prompt", "");
          const int words = static_cast<int>(
              std::vector<std::string>(absl::StrSplit(prompt, ' ', absl::SkipEmpty())).size());
          const int max_tokens = body.value("max_tokens", 1);
          {
            std::lock_guard<std::mutex> lock(mu_);
            prompt_words_.push_back(words);
            max_tokens_.push_back(max_tokens);
          }
          std::string sse;
          for (int i = 0; i < max_tokens; ++i) {
            sse += "data: {\"choices\": [{\"index\": 0, \"text\": \" x\"}]}\n\n";
          }
          sse += absl::StrCat("data: {\"choices\": [], \"usage\": {\"prompt_tokens\": ", words,
                              ", \"completion_tokens\": ", max_tokens, "}}\n\ndata: [DONE]\n\n");
          response.set_content(sse, "text/event-stream");
        });
    serving_ = std::make_unique<test_support::HttpServerThread>(&server_);
  }

  std::string address() const { return serving_->address(); }
  std::vector<int> prompt_words() {
    std::lock_guard<std::mutex> lock(mu_);
    return prompt_words_;
  }
  std::vector<int> max_tokens() {
    std::lock_guard<std::mutex> lock(mu_);
    return max_tokens_;
  }

 private:
  httplib::Server server_;
  std::mutex mu_;
  std::vector<int> prompt_words_;
  std::vector<int> max_tokens_;
  std::unique_ptr<test_support::HttpServerThread> serving_;  // last: stops first
};

TEST(ServePhasesTest, SendsThePhasesInOrderAndReportsEach) {
  WordCountingRouter router;
  ServeBenchOptions options;
  options.client.protocol = ServeProtocol::kHttp;
  options.client.server = router.address();
  // Fast rates: the whole load takes about half a second.
  options.phases = {{.input_len = 60, .output_len = 2, .num_prompts = 4, .request_rate = 20},
                    {.input_len = 8, .output_len = 5, .num_prompts = 3, .request_rate = 20}};
  options.slo.ttft_s = 10;
  options.seed = 5;
  std::ostringstream log;
  absl::StatusOr<ServeBenchResult> result = RunServeBench(options, log);
  ASSERT_TRUE(result.ok()) << result.status() << "\n" << log.str();
  const nlohmann::json& j = result->json;
  EXPECT_EQ(j["completed"], 7) << j.dump(2);
  EXPECT_EQ(j["num_prompts"], 7);
  ASSERT_EQ(j["phases"].size(), 2u);
  const nlohmann::json& first = j["phases"][0];
  const nlohmann::json& second = j["phases"][1];
  EXPECT_EQ(first["completed"], 4);
  EXPECT_EQ(second["completed"], 3);
  EXPECT_EQ(first["input_len"], 60);
  EXPECT_EQ(second["output_len"], 5);
  EXPECT_EQ(first["total_input_tokens"], 4 * 60);  // the stand-in counts words as tokens
  EXPECT_EQ(second["total_output_tokens"], 3 * 5);
  EXPECT_DOUBLE_EQ(first["end_s"].get<double>(), second["start_s"].get<double>());
  EXPECT_GT(second["end_s"].get<double>(), second["start_s"].get<double>());
  EXPECT_EQ(first["good_requests"], 4);
  // Per request, in the load's order: what was generated (runs of one load compare by it).
  ASSERT_EQ(j["requests"]["generated_texts"].size(), 7u);
  EXPECT_EQ(j["requests"]["generated_texts"][0], " x x");
  EXPECT_EQ(j["requests"]["generated_texts"][6], " x x x x x");
  // After the two calibration probes: four long prompts asking for 2 tokens, three short ones
  // asking for 5 (requests a few ms apart may reach the stand-in in either order), the first
  // long one before the last short one.
  const std::vector<int> words = router.prompt_words();
  const std::vector<int> max_tokens = router.max_tokens();
  ASSERT_EQ(words.size(), 2u + 7u);
  int long_prompts = 0, short_prompts = 0;
  for (size_t i = 2; i < words.size(); ++i) {
    long_prompts += words[i] == 60 && max_tokens[i] == 2;
    short_prompts += words[i] == 8 && max_tokens[i] == 5;
  }
  EXPECT_EQ(long_prompts, 4);
  EXPECT_EQ(short_prompts, 3);
  EXPECT_EQ(words[2], 60);
  EXPECT_EQ(words.back(), 8);
  const std::string table = FormatServeTable(j);
  EXPECT_NE(table.find("phase 2: 8 in / 5 out x 3 at 20 req/s"), std::string::npos) << table;
}

TEST(ServePhasesTest, RefusesPhasesWithAClosedLoopOrConversations) {
  ServeBenchOptions options;
  options.client.server = "127.0.0.1:1";
  options.phases = {{.input_len = 8, .output_len = 2, .num_prompts = 1, .request_rate = 1}};
  options.concurrency = 2;
  absl::StatusOr<ServeBenchResult> result = RunServeBench(options, std::cerr);
  ASSERT_FALSE(result.ok());
  EXPECT_NE(result.status().message().find("--phases"), std::string::npos) << result.status();
}

}  // namespace
}  // namespace baton::bench
