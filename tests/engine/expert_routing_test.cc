// The routing of a mixture of experts: the chosen experts and weights against a plain softmax,
// the renormalization, ties, the grouping by expert and the shared expert's slot.
#include "engine/expert_routing.h"

#include <cmath>
#include <vector>

#include "gtest/gtest.h"

namespace baton::engine {
namespace {

TEST(ExpertRoutingTest, ChoosesTheMostProbableExpertsWithTheirSoftmaxWeights) {
  // Two tokens over four experts.
  const std::vector<float> logits = {0.0f, 2.0f, 1.0f, -1.0f,  //
                                     3.0f, 0.0f, 0.0f, 2.5f};
  ExpertRouting r;
  r.Route(logits.data(), nullptr, nullptr, 2, {.count = 4, .used = 2, .n_ff = 32});
  ASSERT_EQ(r.slots, 2);
  auto softmax = [&](int token, int e) {
    double sum = 0;
    for (int j = 0; j < 4; ++j) sum += std::exp(logits[token * 4 + j]);
    return std::exp(logits[token * 4 + e]) / sum;
  };
  // Token 0: experts 1 then 2; token 1: experts 0 then 3.
  const int chosen[2][2] = {{1, 2}, {0, 3}};
  for (int i = 0; i < 2; ++i) {
    for (int j = 0; j < 2; ++j) {
      const int64_t row = r.slot_row[i * 2 + j];
      EXPECT_EQ(r.token_of_row[row], i);
      EXPECT_GE(row, r.first_row[chosen[i][j]]);
      EXPECT_LT(row, r.first_row[chosen[i][j] + 1]);
      EXPECT_NEAR(r.slot_weight[i * 2 + j], softmax(i, chosen[i][j]), 1e-6);
    }
  }
  // Grouped by expert: 0 holds token 1, 1 token 0, 2 token 0, 3 token 1.
  EXPECT_EQ(r.first_row, (std::vector<int64_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(r.token_of_row, (std::vector<int64_t>{1, 0, 0, 1}));
}

TEST(ExpertRoutingTest, RenormalizedWeightsSumToOneAndTiesGoToTheLowerIndex) {
  const std::vector<float> logits = {1.0f, 1.0f, 1.0f, 0.0f};
  ExpertRouting r;
  r.Route(logits.data(), nullptr, nullptr, 1, {.count = 4, .used = 2, .normalize_weights = true});
  EXPECT_EQ(r.token_of_row.size(), 2u);
  EXPECT_EQ(r.first_row, (std::vector<int64_t>{0, 1, 2, 2, 2}));  // experts 0 and 1
  EXPECT_FLOAT_EQ(r.slot_weight[0], 0.5f);
  EXPECT_FLOAT_EQ(r.slot_weight[1], 0.5f);
}

TEST(ExpertRoutingTest, ManyTokensOfOneExpertAreItsRowsInTokenOrder) {
  std::vector<float> logits;
  for (int i = 0; i < 5; ++i) logits.insert(logits.end(), {5.0f, 0.0f, 0.0f});
  ExpertRouting r;
  r.Route(logits.data(), nullptr, nullptr, 5, {.count = 3, .used = 1});
  EXPECT_EQ(r.first_row, (std::vector<int64_t>{0, 5, 5, 5}));
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(r.token_of_row[i], i);
    EXPECT_EQ(r.slot_row[i], i);
  }
}

TEST(ExpertRoutingTest, TheSharedExpertIsTheLastSlotWithASigmoidWeight) {
  const std::vector<float> logits = {0.0f, 1.0f, 1.0f, 0.0f};
  const std::vector<float> shared = {0.0f, -2.0f};
  ExpertRouting r;
  r.Route(logits.data(), shared.data(), nullptr, 2, {.count = 2, .used = 1, .n_ff_shared = 64});
  ASSERT_EQ(r.slots, 2);
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(r.slot_row[i * 2 + 1], 2 + i);  // after the n * used expert rows
    EXPECT_NEAR(r.slot_weight[i * 2 + 1], 1.0 / (1.0 + std::exp(-shared[i])), 1e-7);
  }
}

TEST(ExpertRoutingTest, SigmoidGatingChoosesByTheBiasedScoreButWeighsByTheUnbiasedOne) {
  // Sigmoids 0.5, 0.73, 0.27, 0.88; the bias lifts expert 0 past expert 1 for the choice only.
  const std::vector<float> logits = {0.0f, 1.0f, -1.0f, 2.0f};
  const std::vector<float> bias = {0.5f, 0.0f, 0.0f, 0.0f};
  ExpertRouting r;
  r.Route(logits.data(), nullptr, bias.data(), 1,
          {.count = 4, .used = 2, .gating = ExpertGating::kSigmoid, .weights_scale = 2.5f,
           .selection_bias = true});
  auto sigmoid = [](float x) { return 1.0f / (1.0f + std::exp(-x)); };
  ASSERT_EQ(r.token_of_row.size(), 2u);
  EXPECT_EQ(r.first_row[1] - r.first_row[0], 1);  // expert 0 chosen, by the bias
  EXPECT_EQ(r.first_row[2] - r.first_row[1], 0);  // expert 1 not
  EXPECT_EQ(r.first_row[4] - r.first_row[3], 1);
  EXPECT_FLOAT_EQ(r.slot_weight[0], sigmoid(0.0f) * 2.5f);  // expert 0's biased 1.0 is first
  EXPECT_FLOAT_EQ(r.slot_weight[1], sigmoid(2.0f) * 2.5f);
}

TEST(ExpertRoutingTest, GroupLimitedRoutingChoosesOnlyWithinTheBestGroups) {
  // Groups {0,1}, {2,3}, {4,5}, scored by the sums of their two best sigmoids: 1.44, 1.22, 1.38.
  // With one group kept, the experts are 0 and 1.
  const std::vector<float> logits = {1.0f, 0.9f, 0.95f, 0.0f, 0.8f, 0.8f};
  ExpertRouting r;
  r.Route(logits.data(), nullptr, nullptr, 1,
          {.count = 6, .used = 2, .gating = ExpertGating::kSigmoid, .groups = 3,
           .groups_used = 1});
  EXPECT_EQ(r.first_row[1] - r.first_row[0], 1);
  EXPECT_EQ(r.first_row[2] - r.first_row[1], 1);
  EXPECT_EQ(r.first_row[3] - r.first_row[2], 0);
  // Two groups kept ({0,1} and {4,5}): three experts are 0, 1 and 4 (the tie to the lower
  // index), not 2, though its probability beats 4's.
  r.Route(logits.data(), nullptr, nullptr, 1,
          {.count = 6, .used = 3, .gating = ExpertGating::kSigmoid, .groups = 3,
           .groups_used = 2});
  const std::vector<int64_t> first_row = {0, 1, 2, 2, 2, 3, 3};
  EXPECT_EQ(r.first_row, first_row);
}

TEST(ExpertRoutingTest, AnUngatedSharedExpertWeighsOne) {
  const std::vector<float> logits = {0.0f, 1.0f};
  ExpertRouting r;
  r.Route(logits.data(), nullptr, nullptr, 1,
          {.count = 2, .used = 1, .n_ff_shared = 64, .shared_gate = false});
  ASSERT_EQ(r.slots, 2);
  EXPECT_EQ(r.slot_weight[1], 1.0f);
}

}  // namespace
}  // namespace baton::engine
