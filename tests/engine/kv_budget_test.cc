// The KV a decode worker holds at admission: the rule its reservations and the router share.
#include "engine/kv_budget.h"

#include "gtest/gtest.h"

namespace baton::engine {
namespace {

TEST(KvBudgetTest, HoldsThePromptAndTheFirstGeneratedTokens) {
  EXPECT_EQ(KvTokensAtAdmission(100, 256, 64), 164);
  // Never more than prompt + max_tokens - 1: the last token's KV is never written.
  EXPECT_EQ(KvTokensAtAdmission(100, 10, 64), 109);
  EXPECT_EQ(KvTokensAtAdmission(100, 1, 64), 100);
  EXPECT_EQ(KvTokensAtAdmission(100, 256, 0), 100);
}

TEST(KvBudgetTest, NegativeReserveAheadHoldsAllOfMaxTokens) {
  EXPECT_EQ(KvTokensAtAdmission(100, 256, -1), 355);
}

TEST(KvBudgetTest, BlocksRoundUp) {
  EXPECT_EQ(KvBlocksFor(0, 16), 0);
  EXPECT_EQ(KvBlocksFor(1, 16), 1);
  EXPECT_EQ(KvBlocksFor(16, 16), 1);
  EXPECT_EQ(KvBlocksFor(17, 16), 2);
}

}  // namespace
}  // namespace baton::engine
