// `baton bench engine` (bench/engine_bench.h) on a tiny synthetic model: the figures it reports
// and the ratios against the roofline, per batch size, and against reads paired with decode
// steps; a device this machine lacks is an error.
#include "bench/engine_bench.h"

#include <string>

#include "absl/status/status.h"
#include "engine/synthetic_model.h"
#include "gtest/gtest.h"
#include "kernels/backend_factory.h"
#include "tests/support/temp_path.h"

namespace baton::bench {
namespace {

std::string TinyModel() {
  const std::string path = test_support::TempPath("engine-bench-tiny.gguf");
  EXPECT_TRUE(engine::WriteSyntheticModel(path, {.n_ctx = 512}).ok());
  return path;
}

TEST(EngineBenchTest, ReportsSpeedsAndRooflineFractionsPerBatchSize) {
  const EngineBenchOptions options{.model_path = TinyModel(),
                                   .n_threads = 1,
                                   .prompt_tokens = 32,
                                   .decode_tokens = 4,
                                   .batch_sizes = {1, 3},
                                   .batch_decode_steps = 2,
                                   .repeats = 1};
  absl::StatusOr<nlohmann::json> result = RunEngineBench(options);
  ASSERT_TRUE(result.ok()) << result.status();
  const nlohmann::json& r = *result;
  EXPECT_EQ(r["device"], "cpu");
  EXPECT_GT(r["prefill_tokens_per_s"].get<double>(), 0.0);
  EXPECT_GT(r["decode_tokens_per_s"].get<double>(), 0.0);
  EXPECT_GT(r["weight_bytes_per_decode_step"].get<int64_t>(), 0);
  const double roofline = r["decode_roofline_tokens_per_s"].get<double>();
  EXPECT_NEAR(r["decode_roofline_fraction"].get<double>(),
              r["decode_tokens_per_s"].get<double>() / roofline, 1e-9);
  for (const std::string batch : {"1", "3"}) {
    const double rate = r["batched_decode_tokens_per_s"][batch].get<double>();
    EXPECT_GT(rate, 0.0) << batch;
    EXPECT_NEAR(r["batched_decode_roofline_fraction"][batch].get<double>(),
                rate / std::stoi(batch) / roofline, 1e-9)
        << batch;
  }
  // Reads paired with decode steps (CPU only): a bandwidth and a fraction of it.
  EXPECT_GT(r["decode_paired_read_gb_per_s"].get<double>(), 0.0);
  EXPECT_GT(r["decode_paired_read_fraction"].get<double>(), 0.0);
  // The GPU-only comparison with cuBLAS is absent on a CPU.
  EXPECT_FALSE(r.contains("prefill_fraction_of_cublas"));
}

TEST(EngineBenchTest, DecodesAfterTheContextAskedForWithinTheModels) {
  EngineBenchOptions options{.model_path = TinyModel(),
                             .n_threads = 1,
                             .prompt_tokens = 8,
                             .decode_tokens = 4,
                             .decode_context = 500,
                             .batch_sizes = {1},
                             .batch_decode_steps = 2,
                             .repeats = 1};
  absl::StatusOr<nlohmann::json> result = RunEngineBench(options);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ((*result)["decode_context"], 500);
  EXPECT_GT((*result)["decode_tokens_per_s"].get<double>(), 0.0);

  // 509 + 4 tokens: past the model's context of 512.
  options.decode_context = 509;
  result = RunEngineBench(options);
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(result.status().message().find("past the model's context of 512"), std::string::npos)
      << result.status();
}

TEST(EngineBenchTest, AGpuThisMachineLacksIsUnavailable) {
  if (kernels::DescribeGpus().ok()) GTEST_SKIP() << "this machine has a GPU";
  EngineBenchOptions options{.model_path = TinyModel()};
  options.device = {.kind = kernels::Device::Kind::kCuda, .index = 0};
  absl::StatusOr<nlohmann::json> result = RunEngineBench(options);
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), absl::StatusCode::kUnavailable) << result.status();
}

}  // namespace
}  // namespace baton::bench
