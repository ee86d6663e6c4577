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
