// What `baton bench serve` reports: vLLM-named JSON keys, the readable table, the plot's data.
#include "bench/latency_plot.h"
#include "bench/serve_bench.h"

#include "absl/strings/str_split.h"
#include "gtest/gtest.h"

namespace baton::bench {
namespace {

RequestOutcome Ok(double ttft_s, double e2e_s, int32_t output_tokens, std::vector<double> itl) {
  RequestOutcome r;
  r.ok = true;
  r.ttft_s = ttft_s;
  r.e2e_s = e2e_s;
  r.output_tokens = output_tokens;
  r.prompt_tokens = 8;
  r.itl_s = std::move(itl);
  return r;
}

TEST(MetricsJsonTest, UsesVllmKeysInMilliseconds) {
  RequestOutcome failed;
  failed.error = "DEADLINE_EXCEEDED";
  const std::vector<RequestOutcome> outcomes = {Ok(0.1, 0.4, 4, {0.1, 0.1, 0.1}), failed};
  const Slo slo{.ttft_s = 0.2, .tpot_s = 0.05};
  const nlohmann::json j = MetricsJson(ComputeServeMetrics(outcomes, 1.0, slo), slo);
  EXPECT_EQ(j["completed"], 1);
  EXPECT_EQ(j["failed"], 1);
  EXPECT_EQ(j["errors"]["DEADLINE_EXCEEDED"], 1);
  EXPECT_NEAR(j["mean_ttft_ms"].get<double>(), 100.0, 1e-9);
  EXPECT_NEAR(j["p99_tpot_ms"].get<double>(), 100.0, 1e-9);
  EXPECT_NEAR(j["median_itl_ms"].get<double>(), 100.0, 1e-9);
  EXPECT_NEAR(j["p90_e2el_ms"].get<double>(), 400.0, 1e-9);
  EXPECT_EQ(j["good_requests"], 0);  // TPOT 100 ms > 50 ms
  EXPECT_EQ(j["request_goodput"], 0.0);
  EXPECT_EQ(j["slo_ttft_ms"], 200.0);
  for (const char* key : {"request_throughput", "output_throughput", "total_token_throughput",
                          "std_ttft_ms", "max_itl_ms", "duration", "total_input_tokens"}) {
    EXPECT_TRUE(j.contains(key)) << key;
  }
  const std::string table = FormatServeTable(j);
  EXPECT_NE(table.find("Request goodput"), std::string::npos) << table;
  EXPECT_NE(table.find("DEADLINE_EXCEEDED"), std::string::npos) << table;
  EXPECT_NE(table.find("TTFT"), std::string::npos) << table;
}

TEST(MetricsJsonTest, NoSloMeansNullGoodput) {
  const nlohmann::json j =
      MetricsJson(ComputeServeMetrics({Ok(0.1, 0.4, 4, {})}, 1.0, Slo{}), Slo{});
  EXPECT_TRUE(j["request_goodput"].is_null());
  EXPECT_EQ(FormatServeTable(j).find("goodput"), std::string::npos);
}

baton::v1::WorkerStatus CacheWorker(const std::string& address, baton::v1::WorkerRole role,
                                    int64_t queried, int64_t hits, int64_t evicted) {
  baton::v1::WorkerStatus w;
  w.set_address(address);
  w.set_role(role);
  baton::v1::PrefixCacheStats& s = *w.mutable_load()->mutable_prefix_cache();
  s.set_queried_tokens(queried);
  s.set_hit_tokens(hits);
  s.set_queried_blocks(queried / 16);
  s.set_hit_blocks(hits / 16);
  s.set_evicted_blocks(evicted);
  s.set_cached_blocks(7);
  return w;
}

TEST(WorkerPrefixCacheJsonTest, CountsEachWorkersChangeOverTheRun) {
  baton::v1::ClusterStatusResponse before;
  *before.add_workers() = CacheWorker("p:1", baton::v1::WORKER_ROLE_PREFILL, 320, 160, 2);
  baton::v1::ClusterStatusResponse after;
  *after.add_workers() = CacheWorker("p:1", baton::v1::WORKER_ROLE_PREFILL, 1920, 1440, 5);
  // A worker that joined during the run counts from zero.
  *after.add_workers() = CacheWorker("d:1", baton::v1::WORKER_ROLE_DECODE, 640, 320, 0);
  const nlohmann::json workers = WorkerPrefixCacheJson(before, after);
  ASSERT_EQ(workers.size(), 2u);
  EXPECT_EQ(workers[0]["address"], "p:1");
  EXPECT_EQ(workers[0]["role"], "prefill");
  EXPECT_EQ(workers[0]["queried_tokens"], 1600);
  EXPECT_EQ(workers[0]["hit_tokens"], 1280);
  EXPECT_DOUBLE_EQ(workers[0]["token_hit_rate"].get<double>(), 0.8);
  EXPECT_EQ(workers[0]["queried_blocks"], 100);
  EXPECT_EQ(workers[0]["hit_blocks"], 80);
  EXPECT_EQ(workers[0]["evicted_blocks"], 3);
  EXPECT_EQ(workers[0]["cached_blocks"], 7);
  EXPECT_EQ(workers[1]["role"], "decode");
  EXPECT_DOUBLE_EQ(workers[1]["block_hit_rate"].get<double>(), 0.5);
  // The table names each worker's figures.
  nlohmann::json result = {{"prefix_cache",
                            {{"prompt_tokens", 100}, {"prefill_computed_tokens", 20},
                             {"prefill_hit_rate", 0.8}, {"decode_hit_rate", 0.5},
                             {"kv_bytes_handed_off", 1000}, {"workers", workers}}}};
  const std::string table = FormatServeTable(result);
  EXPECT_NE(table.find("prefill p:1: 80.0% of tokens, 80.0% of blocks hit; 3 blocks evicted"),
            std::string::npos)
      << table;
  EXPECT_TRUE(WorkerPrefixCacheJson({}, {}).empty());
}

TEST(LatencyPlotTest, FourSortedCdfBlocks) {
  const std::string data =
      LatencyCdfData({Ok(0.3, 0.9, 3, {0.4, 0.2}), Ok(0.1, 0.2, 1, {})});
  const std::vector<std::string> blocks = absl::StrSplit(data, "\n\n\n");
  ASSERT_EQ(blocks.size(), 5u);  // four blocks and what follows the last separator
  // TTFT: 100 ms at 0.5, 300 ms at 1.0.
  EXPECT_NE(blocks[0].find("100.000000 0.500000\n300.000000 1.000000"), std::string::npos)
      << blocks[0];
  // TPOT only for the 3-token request: (0.9 - 0.3) / 2.
  EXPECT_NE(blocks[1].find("300.000000 1.000000"), std::string::npos) << blocks[1];
  // ITL pooled and sorted.
  EXPECT_NE(blocks[2].find("200.000000 0.500000\n400.000000 1.000000"), std::string::npos)
      << blocks[2];
  EXPECT_TRUE(blocks[4].empty());
}

}  // namespace
}  // namespace baton::bench
