#include "bench/load_phases.h"

#include <algorithm>
#include <random>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace baton::bench {
namespace {

using ::testing::HasSubstr;

TEST(LoadPhasesTest, ParsesPhasesWithTheirOwnOrTheDefaultRate) {
  absl::StatusOr<std::vector<LoadPhase>> phases = ParseLoadPhases("1024:16:60:1.5,64:256:40", 0.5);
  ASSERT_TRUE(phases.ok()) << phases.status();
  ASSERT_EQ(phases->size(), 2u);
  EXPECT_EQ((*phases)[0].input_len, 1024);
  EXPECT_EQ((*phases)[0].output_len, 16);
  EXPECT_EQ((*phases)[0].num_prompts, 60);
  EXPECT_DOUBLE_EQ((*phases)[0].request_rate, 1.5);
  EXPECT_EQ((*phases)[1].input_len, 64);
  EXPECT_EQ((*phases)[1].output_len, 256);
  EXPECT_EQ((*phases)[1].num_prompts, 40);
  EXPECT_DOUBLE_EQ((*phases)[1].request_rate, 0.5);
}

TEST(LoadPhasesTest, RefusesMalformedPhasesNamingThem) {
  for (const char* spec : {"1024:16", "1024:16:60:1:2", "1024:x:60", "0:16:60", "1024:16:60:-1",
                           "1024:16:60:fast", "1024:16:60,"}) {
    absl::StatusOr<std::vector<LoadPhase>> phases = ParseLoadPhases(spec, 1.0);
    ASSERT_FALSE(phases.ok()) << spec;
    EXPECT_EQ(phases.status().code(), absl::StatusCode::kInvalidArgument) << spec;
    EXPECT_THAT(phases.status().message(), HasSubstr("--phases")) << spec;
  }
  // No rate given and none by default.
  absl::StatusOr<std::vector<LoadPhase>> no_rate = ParseLoadPhases("64:16:10", 0);
  ASSERT_FALSE(no_rate.ok());
  EXPECT_THAT(no_rate.status().message(), HasSubstr("'64:16:10'"));
}

TEST(LoadPhasesTest, BuildsPhasesOneAfterTheOtherWithTheirLengths) {
  const std::vector<LoadPhase> phases = {
      {.input_len = 200, .output_len = 8, .num_prompts = 30, .request_rate = 10},
      {.input_len = 20, .output_len = 100, .num_prompts = 20, .request_rate = 2}};
  std::mt19937_64 rng(3);
  const PhasedLoad load = BuildPhasedLoad(phases, 0, PromptCalibration{}, rng, 11);
  ASSERT_EQ(load.requests.size(), 50u);
  ASSERT_EQ(load.arrivals.size(), 50u);
  EXPECT_TRUE(std::is_sorted(load.arrivals.begin(), load.arrivals.end()));
  ASSERT_EQ(load.phase_start.size(), 2u);
  EXPECT_EQ(load.phase_start[0], 0);
  EXPECT_EQ(load.phase_end[0], load.phase_start[1]);
  for (size_t i = 0; i < load.requests.size(); ++i) {
    const int32_t k = load.phase_of[i];
    EXPECT_EQ(k, i < 30 ? 0 : 1) << i;
    EXPECT_EQ(load.requests[i].target_prompt_tokens, phases[k].input_len) << i;
    EXPECT_EQ(load.requests[i].max_tokens, phases[k].output_len) << i;
    EXPECT_GT(load.arrivals[i], load.phase_start[k]) << i;
    EXPECT_LT(load.arrivals[i], load.phase_end[k]) << i;
  }
  // Each phase lasts about N / rate: 3 s and 10 s (Poisson: within a generous margin).
  EXPECT_NEAR(load.phase_end[0] - load.phase_start[0], 3.0, 1.5);
  EXPECT_NEAR(load.phase_end[1] - load.phase_start[1], 10.0, 5.0);
  // The same seeds: the same load.
  std::mt19937_64 again(3);
  const PhasedLoad same = BuildPhasedLoad(phases, 0, PromptCalibration{}, again, 11);
  EXPECT_EQ(same.arrivals, load.arrivals);
  EXPECT_EQ(same.requests[7].prompt, load.requests[7].prompt);
}

}  // namespace
}  // namespace baton::bench
