#include "decode_worker/speculation_length.h"

#include "gtest/gtest.h"

namespace baton::decode_worker {
namespace {

TEST(SpeculationGainTest, ExpectedTokensPerStepTime) {
  EXPECT_DOUBLE_EQ(SpeculationGain(0.5, 0, 0.1), 1.0);
  // 1 + 0.5 + 0.25 tokens for 1.2 step-times.
  EXPECT_DOUBLE_EQ(SpeculationGain(0.5, 2, 0.1), 1.75 / 1.2);
  EXPECT_DOUBLE_EQ(SpeculationGain(1.0, 4, 0.25), 5.0 / 2.0);
}

TEST(BatchTokenCostTest, AloneItIsTheTokenCost) {
  EXPECT_DOUBLE_EQ(BatchTokenCost(0.24, 1), 0.24);
  EXPECT_DOUBLE_EQ(BatchTokenCost(0.24, 4), 4 * 0.24 / (1 + 3 * 0.24));
}

TEST(BatchTokenCostTest, TheGainTestIsWhetherTheBatchsStepYieldsMoreTokensPerSecond) {
  // n sequences, each proposing k: a step of n (k + 1) rows, 1 + (n (k + 1) - 1) c one-row steps,
  // yields n E(k) tokens; plainly, 1 + (n - 1) c yields n.
  for (const double c : {0.05, 0.24, 0.45, 1.0}) {
    for (const double a : {0.3, 0.6, 0.9}) {
      for (const int n : {1, 2, 4, 8}) {
        for (const int k : {1, 2, 4}) {
          const double expected = SpeculationGain(a, k, 0);  // E(k)
          const double speculative = n * expected / (1 + (n * (k + 1) - 1) * c);
          const double plain = n / (1 + (n - 1) * c);
          EXPECT_NEAR(SpeculationGain(a, k, BatchTokenCost(c, n)), speculative / plain, 1e-12)
              << "c " << c << " a " << a << " n " << n << " k " << k;
        }
      }
    }
  }
  // The case that made it necessary: at 60% acceptance and c = 0.24, 2 proposals are best for a
  // sequence alone; in a step of 4 sequences they would lose 7%, and 1 is what still pays.
  const auto best_k = [](double c) {
    int32_t best = 0;
    for (int32_t k = 1; k <= 4; ++k) {
      if (SpeculationGain(0.6, k, c) > SpeculationGain(0.6, best, c)) best = k;
    }
    return best;
  };
  EXPECT_EQ(best_k(0.24), 2);
  EXPECT_NEAR(SpeculationGain(0.6, 2, BatchTokenCost(0.24, 4)), 0.93, 0.005);
  EXPECT_EQ(best_k(BatchTokenCost(0.24, 4)), 1);
}

TEST(SpeculationLengthTest, AlwaysAcceptedGoesToTheLimit) {
  SpeculationLength length;
  for (int i = 0; i < 10; ++i) {
    const int32_t k = length.Next(5, 0.1);
    ASSERT_GT(k, 0);
    length.Record(k, k);
  }
  EXPECT_EQ(length.Next(5, 0.1), 5);
  EXPECT_EQ(length.Next(2, 0.1), 2);  // never past the limit it is given
  EXPECT_EQ(length.Next(0, 0.1), 0);
}

TEST(SpeculationLengthTest, NeverAcceptedTurnsItselfOffThenRetries) {
  SpeculationLength length;
  int32_t steps = 0;
  while (length.Next(4, 0.2) > 0) {
    length.Record(4, 0);
    ASSERT_LT(++steps, 20) << "speculation never turned itself off";
  }
  EXPECT_LE(length.acceptance(), 0.2);  // k = 1 pays only while acceptance > token cost
  // Off for kRetrySteps more steps, the last of which restores the prior; then it tries again.
  for (int i = 0; i < SpeculationLength::kRetrySteps; ++i) EXPECT_EQ(length.Next(4, 0.2), 0);
  EXPECT_GT(length.Next(4, 0.2), 0);
}

TEST(SpeculationLengthTest, ShorterWhenTokensCostMore) {
  SpeculationLength length;
  for (int i = 0; i < 10; ++i) length.Record(4, 2);  // about 2 of 3 trials succeed
  const int32_t cheap = length.Next(8, 0.02);
  SpeculationLength same = length;
  const int32_t dear = same.Next(8, 0.3);
  EXPECT_GT(cheap, dear);
  EXPECT_GT(dear, 0);
}

}  // namespace
}  // namespace baton::decode_worker
