#include "engine/block_hash.h"

#include <vector>

#include "gtest/gtest.h"

namespace baton::engine {
namespace {

std::vector<TokenId> Tokens(int n, int salt) {
  std::vector<TokenId> tokens;
  for (int i = 0; i < n; ++i) tokens.push_back(i * 7 + salt);
  return tokens;
}

TEST(BlockHashTest, OneHashPerFullBlockOnly) {
  const uint64_t seed = BlockHashSeed("model-a");
  EXPECT_EQ(PrefixBlockHashes(seed, Tokens(15, 0), 4).size(), 3u);
  EXPECT_EQ(PrefixBlockHashes(seed, Tokens(16, 0), 4).size(), 4u);
  EXPECT_TRUE(PrefixBlockHashes(seed, Tokens(3, 0), 4).empty());
  EXPECT_TRUE(PrefixBlockHashes(seed, Tokens(8, 0), 0).empty());
}

TEST(BlockHashTest, EqualPrefixesHashEquallyUntilTheyDiverge) {
  const uint64_t seed = BlockHashSeed("model-a");
  std::vector<TokenId> a = Tokens(16, 0);
  std::vector<TokenId> b = a;
  b[9] = 999;  // block 2 differs
  const std::vector<uint64_t> ha = PrefixBlockHashes(seed, a, 4);
  const std::vector<uint64_t> hb = PrefixBlockHashes(seed, b, 4);
  EXPECT_EQ(ha[0], hb[0]);
  EXPECT_EQ(ha[1], hb[1]);
  EXPECT_NE(ha[2], hb[2]);
  // The chain: block 3 holds the same tokens in both, but follows a different block 2.
  EXPECT_NE(ha[3], hb[3]);
}

TEST(BlockHashTest, TheSameTokensAfterADifferentPrefixDoNotMatch) {
  const uint64_t seed = BlockHashSeed("model-a");
  const std::vector<TokenId> x = {1, 2, 3, 4, 5, 6, 7, 8};
  const std::vector<TokenId> y = {9, 9, 9, 9, 5, 6, 7, 8};
  EXPECT_NE(PrefixBlockHashes(seed, x, 4)[1], PrefixBlockHashes(seed, y, 4)[1]);
}

TEST(BlockHashTest, NoHashOfOneModelMatchesAnothers) {
  const std::vector<TokenId> tokens = Tokens(64, 3);
  const std::vector<uint64_t> a = PrefixBlockHashes(BlockHashSeed("model-a"), tokens, 4);
  const std::vector<uint64_t> b = PrefixBlockHashes(BlockHashSeed("model-b"), tokens, 4);
  ASSERT_EQ(a.size(), b.size());
  for (uint64_t hash : a) {
    for (uint64_t other : b) EXPECT_NE(hash, other);
  }
}

TEST(BlockHashTest, ASaltSeparatesRequestsOfOneModel) {
  const std::vector<TokenId> tokens = Tokens(8, 2);
  const uint64_t model = BlockHashSeed("model-a");
  EXPECT_EQ(BlockHashSeed("model-a", ""), model);
  EXPECT_EQ(BlockHashSeed("model-a", "tenant-1"), SaltedSeed(model, "tenant-1"));
  EXPECT_NE(SaltedSeed(model, "tenant-1"), model);
  EXPECT_NE(SaltedSeed(model, "tenant-1"), SaltedSeed(model, "tenant-2"));
  EXPECT_NE(PrefixBlockHashes(SaltedSeed(model, "tenant-1"), tokens, 4)[1],
            PrefixBlockHashes(model, tokens, 4)[1]);
}

TEST(BlockHashTest, BlockSizeIsPartOfTheIdentity) {
  const uint64_t seed = BlockHashSeed("model-a");
  const std::vector<TokenId> tokens = Tokens(16, 1);
  EXPECT_NE(PrefixBlockHashes(seed, tokens, 4)[1], PrefixBlockHashes(seed, tokens, 8)[0]);
}

}  // namespace
}  // namespace baton::engine
