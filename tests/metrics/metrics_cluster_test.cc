// Metrics across a real cluster: a router in this process (its registry is this process's global
// one, also served on its HTTP port) and a prefill and a decode worker as `baton` processes started
// with --metrics-port 0. One request through the router moves the router's histograms and counters,
// the prefill worker's and the decode worker's, as scraped from the workers' GET /metrics.
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "baton/v1/router.grpc.pb.h"
#include "cli/child_process.h"
#include "engine/sampling_params.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "httplib.h"
#include "metrics/metrics.h"
#include "router/router_server.h"
#include "rpc/sampling_params_proto.h"
#include "rpc/server_options.h"
#include "tests/support/test_paths.h"

namespace baton {
namespace {

using testing::HasSubstr;

std::string BatonBinary() { return std::string(BATON_BINARY_DIR) + "/bin/baton"; }

// The model_name label every series carries: the model's file name without ".gguf", as the
// router's /v1/models names it.
std::string ModelNameLabel() {
  const std::filesystem::path model(test_support::DefaultModelPath());
  return absl::StrCat("model_name=\"", model.stem().string(), "\"");
}

// A sample line without the model_name label.
std::string WithoutModelName(absl::string_view line) {
  const std::string label = ModelNameLabel();
  std::string out(line);
  for (const std::string& form :
       {absl::StrCat("{", label, "}"), absl::StrCat(label, ","), absl::StrCat(",", label)}) {
    const size_t at = out.find(form);
    if (at != std::string::npos) {
      out.erase(at, form.size());
      break;
    }
  }
  return out;
}

// The value of the sample line `series value` (series with its labels as rendered, less
// model_name), or NaN.
double Sample(const std::string& text, const std::string& series) {
  for (absl::string_view rendered : absl::StrSplit(text, '\n')) {
    const std::string line = WithoutModelName(rendered);
    if (line.size() > series.size() && line.compare(0, series.size(), series) == 0 &&
        line[series.size()] == ' ') {
      double value = 0;
      if (absl::SimpleAtod(absl::string_view(line).substr(series.size() + 1), &value)) {
        return value;
      }
    }
  }
  return std::nan("");
}

// Every sample line of `text` carries the model_name label, and there are some.
void ExpectModelNameOnEverySeries(const std::string& text, const std::string& who) {
  int n_samples = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    if (line[0] == '#') continue;
    ++n_samples;
    EXPECT_THAT(std::string(line), HasSubstr(ModelNameLabel())) << who;
  }
  EXPECT_GT(n_samples, 0) << who;
}

struct Worker {
  std::unique_ptr<cli::ChildProcess> process;
  std::string address;
  std::string metrics_address;
};

absl::StatusOr<Worker> StartWorker(const std::string& role, const std::string& router) {
  absl::StatusOr<std::unique_ptr<cli::ChildProcess>> p = cli::ChildProcess::Start(
      {BatonBinary(), role, "--model", test_support::DefaultModelPath(), "--router", router,
       "--threads", "1", "--kv-cache-memory", "64M", "--metrics-port", "0"});
  if (!p.ok()) return p.status();
  Worker w;
  w.process = std::move(*p);
  absl::StatusOr<std::string> address =
      w.process->WaitForLine("listening on ", std::chrono::seconds(60));
  if (!address.ok()) return address.status();
  w.address = *address;
  absl::StatusOr<std::string> metrics =
      w.process->WaitForLine("metrics listening on ", std::chrono::seconds(10));
  if (!metrics.ok()) return metrics.status();
  w.metrics_address = *metrics;
  return w;
}

// GET path from host:port; the body, or "" with a test failure.
std::string HttpGet(const std::string& address, const std::string& path,
                    std::string* content_type = nullptr) {
  const size_t colon = address.rfind(':');
  httplib::Client client(address.substr(0, colon), std::atoi(address.c_str() + colon + 1));
  client.set_connection_timeout(5);
  httplib::Result result = client.Get(path.c_str());
  if (!result) {
    ADD_FAILURE() << "GET " << address << path << ": " << httplib::to_string(result.error());
    return "";
  }
  EXPECT_EQ(result->status, 200) << address << path;
  if (content_type != nullptr) *content_type = result->get_header_value("Content-Type");
  return result->body;
}

// The router's registry, as its /metrics would render it.
std::string RouterMetrics() { return metrics::Registry::Global().RenderText(); }

TEST(MetricsClusterTest, OneRequestMovesRouterPrefillAndDecodeMetrics) {
  router::RouterOptions options;
  options.server.port = 0;
  options.model_path = test_support::DefaultModelPath();
  options.heartbeat_interval = absl::Milliseconds(200);
  options.http_port = 0;
  router::Router router(options);
  ASSERT_TRUE(router.Start().ok());
  absl::StatusOr<Worker> prefill = StartWorker("prefill", router.address());
  ASSERT_TRUE(prefill.ok()) << prefill.status();
  absl::StatusOr<Worker> decode = StartWorker("decode", router.address());
  ASSERT_TRUE(decode.ok()) << decode.status();
  EXPECT_THAT(decode->metrics_address, testing::StartsWith("127.0.0.1:"));
  EXPECT_NE(decode->metrics_address, prefill->metrics_address);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (true) {
    int healthy = 0;
    for (const router::WorkerSnapshot& w : router.registry().Snapshot()) healthy += w.healthy;
    if (healthy >= 2) break;
    ASSERT_LT(std::chrono::steady_clock::now(), deadline) << "workers did not become healthy";
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }

  // Before: the series exist (exported from the start) and are empty.
  std::string content_type;
  const std::string decode_before = HttpGet(decode->metrics_address, "/metrics", &content_type);
  EXPECT_EQ(content_type, metrics::kTextContentType);
  EXPECT_GT(Sample(decode_before, "baton:kv_cache_blocks"), 0);
  EXPECT_EQ(Sample(decode_before, "baton:kv_cache_blocks_used"), 0);
  EXPECT_EQ(Sample(decode_before, "baton:kv_blocks_received_total"), 0);
  EXPECT_EQ(Sample(decode_before, "baton:batch_size_count"), 0);
  EXPECT_EQ(Sample(decode_before, "baton:reservations_expired_total"), 0);
  const std::string prefill_before = HttpGet(prefill->metrics_address, "/metrics");
  EXPECT_EQ(Sample(prefill_before, "baton:prompt_tokens_total"), 0);
  EXPECT_EQ(Sample(prefill_before, "baton:num_prefill_tokens_queued"), 0);
  EXPECT_GT(Sample(prefill_before, "baton:kv_cache_blocks"), 0);
  EXPECT_EQ(Sample(prefill_before, "baton:kv_cache_blocks_used"), 0);
  // Every worker has both sides (its role says which takes new work, and changes in place): the
  // prefill worker's decode side is idle, and its role is named.
  EXPECT_EQ(Sample(prefill_before, "baton:num_requests_running"), 0);
  EXPECT_EQ(Sample(prefill_before, "baton:worker_role{role=\"prefill\"}"), 1);
  EXPECT_EQ(Sample(prefill_before, "baton:worker_role{role=\"decode\"}"), 0);
  EXPECT_EQ(Sample(decode_before, "baton:worker_role{role=\"decode\"}"), 1);
  const std::string router_before = RouterMetrics();
  // Every process: a model_name on every series, and the process_* metrics.
  for (const auto& [who, text] : {std::pair<std::string, std::string>{"decode", decode_before},
                                  {"prefill", prefill_before},
                                  {"router", router_before}}) {
    ExpectModelNameOnEverySeries(text, who);
    EXPECT_GT(Sample(text, "process_resident_memory_bytes"), 0) << who;
    EXPECT_GT(Sample(text, "process_start_time_seconds"), 0) << who;
    EXPECT_GT(Sample(text, "process_open_fds"), 0) << who;
    EXPECT_GE(Sample(text, "process_cpu_seconds_total"), 0) << who;
  }
  auto router_delta = [&](const std::string& series) {
    const double before = Sample(router_before, series);
    return Sample(RouterMetrics(), series) - (std::isnan(before) ? 0 : before);
  };

  // One request: greedy, exactly 8 tokens.
  absl::StatusOr<std::shared_ptr<grpc::Channel>> channel = rpc::MakeChannel(router.address(), {});
  ASSERT_TRUE(channel.ok());
  auto stub = v1::Router::NewStub(*channel);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(120));
  v1::GenerateRequest request;
  request.set_prompt("The capital of France is");
  *request.mutable_sampling() = rpc::SamplingParamsToProto(
      engine::SamplingParams{.temperature = 0, .max_tokens = 8, .ignore_eos = true});
  auto reader = stub->Generate(&context, request);
  v1::GenerateResponse response;
  v1::GenerateResponse last;
  int n_tokens = 0;
  while (reader->Read(&response)) {
    n_tokens += response.tokens_size();
    last = response;
  }
  const grpc::Status status = reader->Finish();
  ASSERT_TRUE(status.ok()) << status.error_message();
  ASSERT_EQ(n_tokens, 8);
  ASSERT_EQ(last.finish_reason(), v1::FINISH_REASON_LENGTH);
  const int n_prompt = last.usage().prompt_tokens();
  ASSERT_GT(n_prompt, 0);

  // Router: the request ended with "length" and went through every histogram once (ITL once per
  // token after the first).
  EXPECT_EQ(router_delta("baton:request_success_total{finished_reason=\"length\"}"), 1);
  EXPECT_EQ(router_delta("baton:time_to_first_token_seconds_count"), 1);
  EXPECT_EQ(router_delta("baton:e2e_request_latency_seconds_count"), 1);
  EXPECT_EQ(router_delta("baton:time_per_output_token_seconds_count"), 1);
  EXPECT_EQ(router_delta("baton:inter_token_latency_seconds_count"), 7);
  EXPECT_EQ(router_delta("baton:request_queue_time_seconds_count"), 1);
  EXPECT_EQ(router_delta("baton:kv_transfer_seconds_count"), 1);
  EXPECT_EQ(router_delta("baton:kv_transfer_bytes_count"), 1);
  EXPECT_GT(router_delta("baton:kv_transfer_bytes_sum"), 0);
  EXPECT_EQ(router_delta("baton:request_prompt_tokens_sum"), n_prompt);
  EXPECT_EQ(router_delta("baton:request_generation_tokens_sum"), 8);
  EXPECT_EQ(router_delta("baton:generation_tokens_total"), 8);
  const std::string router_after = RouterMetrics();
  EXPECT_EQ(Sample(router_after, "baton:num_requests_running"), 0);
  EXPECT_EQ(Sample(router_after, "baton:num_requests_waiting"), 0);
  EXPECT_EQ(Sample(router_after, "baton:e2e_request_latency_seconds_bucket{le=\"+Inf\"}"),
            Sample(router_after, "baton:e2e_request_latency_seconds_count"));
  // The router serves the same registry on its HTTP port.
  const std::string router_http = HttpGet(router.http_address(), "/metrics");
  EXPECT_EQ(Sample(router_http, "baton:time_to_first_token_seconds_count"),
            Sample(router_after, "baton:time_to_first_token_seconds_count"));

  // Prefill worker: one batch of the prompt, its KV pushed and acknowledged.
  const std::string prefill_after = HttpGet(prefill->metrics_address, "/metrics");
  EXPECT_EQ(Sample(prefill_after, "baton:prompt_tokens_total"), n_prompt);
  EXPECT_EQ(Sample(prefill_after, "baton:prefill_batch_tokens_count"), 1);
  EXPECT_EQ(Sample(prefill_after, "baton:prefill_batch_tokens_sum"), n_prompt);
  EXPECT_EQ(Sample(prefill_after, "baton:prefill_seconds_count"), 1);
  EXPECT_EQ(Sample(prefill_after, "baton:kv_transfer_seconds_count"), 1);

  // Decode worker: the prompt's KV arrived, 7 decode steps of one sequence ran, and every block is
  // free again once the sequence has left.
  const std::string decode_after = HttpGet(decode->metrics_address, "/metrics");
  EXPECT_GT(Sample(decode_after, "baton:kv_cache_blocks"), 0);
  EXPECT_GT(Sample(decode_after, "baton:kv_blocks_received_total"), 0);
  EXPECT_GT(Sample(decode_after, "baton:kv_bytes_received_total"), 0);
  EXPECT_GE(Sample(decode_after, "baton:batch_size_count"), 7);
  EXPECT_EQ(Sample(decode_after, "baton:batch_size_bucket{le=\"1\"}"),
            Sample(decode_after, "baton:batch_size_count"));
  const auto free_deadline = std::chrono::steady_clock::now() + std::chrono::seconds(15);
  std::string decode_idle, prefill_idle;
  do {
    decode_idle = HttpGet(decode->metrics_address, "/metrics");
    prefill_idle = HttpGet(prefill->metrics_address, "/metrics");
    if (Sample(decode_idle, "baton:kv_cache_blocks_used") == 0 &&
        Sample(prefill_idle, "baton:kv_cache_blocks_used") == 0) {
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  } while (std::chrono::steady_clock::now() < free_deadline);
  EXPECT_EQ(Sample(decode_idle, "baton:kv_cache_blocks_used"), 0);
  EXPECT_EQ(Sample(prefill_idle, "baton:kv_cache_blocks_used"), 0);  // the hand-off's scratch
  EXPECT_EQ(Sample(decode_idle, "baton:kv_cache_usage_perc"), 0);
  EXPECT_EQ(Sample(decode_idle, "baton:num_requests_running"), 0);
  EXPECT_EQ(Sample(decode_idle, "baton:num_reservations"), 0);

  // The prefix cache: the short prompt was looked up on both sides (no full block to find).
  EXPECT_EQ(Sample(prefill_after, "baton:prefix_cache_queries_total"), n_prompt);
  EXPECT_EQ(Sample(prefill_after, "baton:prefix_cache_hits_total"), 0);
  EXPECT_EQ(Sample(decode_after, "baton:prefix_cache_queries_total"), n_prompt);
  EXPECT_EQ(Sample(decode_after, "baton:prefix_cache_hits_total"), 0);
  EXPECT_EQ(Sample(decode_after, "baton:prefix_cache_evicted_blocks_total"), 0);
  // A longer prompt twice: the second time both sides hold all of it but its last partial block.
  std::string long_prompt;
  for (int i = 0; i < 8; ++i) long_prompt += "The river runs to the sea under the old bridge. ";
  int32_t long_tokens = 0;
  for (int i = 0; i < 2; ++i) {
    grpc::ClientContext again;
    again.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(120));
    request.set_prompt(long_prompt);
    auto long_reader = stub->Generate(&again, request);
    while (long_reader->Read(&response)) last = response;
    ASSERT_TRUE(long_reader->Finish().ok());
    long_tokens = last.usage().prompt_tokens();
  }
  const double expected_hits = (long_tokens - 1) / 16 * 16;
  ASSERT_GT(expected_hits, 0);
  EXPECT_EQ(last.usage().cached_prompt_tokens(), expected_hits);
  const std::string prefill_cached = HttpGet(prefill->metrics_address, "/metrics");
  EXPECT_EQ(Sample(prefill_cached, "baton:prefix_cache_hits_total"), expected_hits);
  EXPECT_EQ(Sample(prefill_cached, "baton:prefill_cached_tokens_total"), expected_hits);
  EXPECT_EQ(Sample(prefill_cached, "baton:prefix_cache_block_hits_total"), expected_hits / 16);
  EXPECT_GT(Sample(prefill_cached, "baton:prefix_cache_blocks"), 0);
  const std::string decode_cached = HttpGet(decode->metrics_address, "/metrics");
  EXPECT_EQ(Sample(decode_cached, "baton:prefix_cache_hits_total"), expected_hits);

  EXPECT_EQ(HttpGet(decode->metrics_address, "/health"), "ok\n");
  router.Shutdown();
}

TEST(MetricsClusterTest, BadMetricsPortIsAUsageError) {
  absl::StatusOr<std::unique_ptr<cli::ChildProcess>> p =
      cli::ChildProcess::Start({BatonBinary(), "decode", "--metrics-port", "70000"});
  ASSERT_TRUE(p.ok()) << p.status();
  absl::StatusOr<int> code = (*p)->Wait(std::chrono::seconds(30));
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_EQ(*code, 2);
}

}  // namespace
}  // namespace baton
