// The prefix cache over a real KV cache and transformer (synthetic model): a sequence that starts
// from cached blocks computes only its suffix and gets bitwise the logits of a cold start.
#include "engine/prefix_cache.h"

#include <memory>
#include <vector>

#include "engine/model.h"
#include "engine/synthetic_model.h"
#include "engine/transformer.h"
#include "gtest/gtest.h"
#include "kernels/backend.h"
#include "tests/support/temp_path.h"
#include "tests/support/test_paths.h"

namespace baton::engine {
namespace {

constexpr int32_t kBlockSize = 4;

class PrefixCacheTest : public testing::Test {
 protected:
  void SetUp() override { Load({.seed = 3, .n_ctx = 128}); }

  // The model written from `options`, and a cache of 32 blocks per layer group.
  void Load(const SyntheticModelOptions& options) {
    const std::string path = test_support::TempPath("prefix-cache-" + options.architecture + ".gguf");
    ASSERT_TRUE(engine::WriteSyntheticModel(path, options).ok());
    absl::StatusOr<std::unique_ptr<Model>> model = Model::Load(path);
    ASSERT_TRUE(model.ok()) << model.status();
    model_ = *std::move(model);
    backend_ = kernels::CreateCpuBackend({.n_threads = 1});
    const int32_t n_blocks = 32 * KvCache::LayerGroups(model_->config()).n_groups();
    absl::StatusOr<std::unique_ptr<KvCache>> cache = KvCache::Create(
        model_->config(), {.block_size = kBlockSize, .n_blocks = n_blocks}, *backend_);
    ASSERT_TRUE(cache.ok()) << cache.status();
    cache_ = *std::move(cache);
    transformer_ = std::make_unique<Transformer>(&model_->config(), &model_->weights(),
                                                 backend_.get(), cache_.get());
  }

  // Prefills tokens [table.n_tokens, end) of `tokens` into `table` (growing it) and returns the
  // last token's logits.
  std::vector<float> PrefillRest(const std::vector<TokenId>& tokens, BlockTable& table) {
    EXPECT_TRUE(cache_->Reserve(table, static_cast<int32_t>(tokens.size())).ok());
    SequenceInput input{.tokens = std::span<const TokenId>(tokens).subspan(table.n_tokens),
                        .kv = &table};
    std::vector<float> logits;
    EXPECT_TRUE(transformer_->Prefill({&input, 1}, logits).ok());
    return logits;
  }

  // Computes `tokens` in a fresh table, publishes its full blocks and frees it: they stay cached.
  void CacheOnce(PrefixCache& prefix, const std::vector<TokenId>& tokens) {
    BlockTable table;
    PrefillRest(tokens, table);
    prefix.Publish(tokens, table);
    cache_->Free(table);
  }

  std::unique_ptr<Model> model_;
  std::unique_ptr<kernels::Backend> backend_;
  std::unique_ptr<KvCache> cache_;
  std::unique_ptr<Transformer> transformer_;
};

std::vector<TokenId> Tokens(int n, int diverge_at, int salt) {
  std::vector<TokenId> tokens;
  for (int i = 0; i < n; ++i) tokens.push_back(i < diverge_at ? (i * 5 + 1) % 200 : (i + salt) % 200);
  return tokens;
}

TEST_F(PrefixCacheTest, AHitComputesOnlyTheSuffixAndChangesNoLogit) {
  PrefixCache prefix(cache_.get(), model_->fingerprint(), true);
  const std::vector<TokenId> first = Tokens(18, 18, 0);
  const std::vector<TokenId> second = Tokens(23, 10, 7);  // shares 10 tokens: 2 full blocks

  BlockTable cold;
  const std::vector<float> cold_logits = PrefillRest(second, cold);
  cache_->Free(cold);  // never published: nothing cached

  BlockTable a;
  EXPECT_EQ(prefix.Match(first, MaxCachedTokens(18, kBlockSize), a), 0);
  PrefillRest(first, a);
  prefix.Publish(first, a);
  EXPECT_EQ(cache_->pool().n_cached(), 4);  // 18 tokens: 4 full blocks, the partial one is not
  cache_->Free(a);

  BlockTable b;
  EXPECT_EQ(prefix.Match(second, MaxCachedTokens(23, kBlockSize), b), 8);
  EXPECT_EQ(b.n_tokens, 8);
  EXPECT_EQ(b.groups[0].size(), 2u);
  const std::vector<float> warm_logits = PrefillRest(second, b);
  EXPECT_TRUE(warm_logits == cold_logits) << "logits after a cache hit differ";
  cache_->Free(b);
  EXPECT_EQ(cache_->pool().n_free(), cache_->pool().n_blocks());
}

TEST_F(PrefixCacheTest, AtLeastOneTokenIsLeftToComputeAndOnlyWholeBlocksMatch) {
  EXPECT_EQ(MaxCachedTokens(8, 4), 4);  // 8 tokens: the last must be computed
  EXPECT_EQ(MaxCachedTokens(9, 4), 8);
  EXPECT_EQ(MaxCachedTokens(1, 4), 0);
  EXPECT_EQ(MaxCachedTokens(0, 4), 0);
  PrefixCache prefix(cache_.get(), model_->fingerprint(), true);
  const std::vector<TokenId> tokens = Tokens(12, 12, 0);
  CacheOnce(prefix, tokens);
  BlockTable same;
  EXPECT_EQ(prefix.Match(tokens, MaxCachedTokens(12, kBlockSize), same), 8);
  cache_->Free(same);
  BlockTable capped;
  EXPECT_EQ(prefix.Match(tokens, 7, capped), 4);  // a cap inside a block rounds down
  cache_->Free(capped);
}

TEST_F(PrefixCacheTest, OnlyTheSameSaltMatches) {
  PrefixCache prefix(cache_.get(), model_->fingerprint(), true);
  const std::vector<TokenId> tokens = Tokens(12, 12, 0);
  BlockTable table;
  PrefillRest(tokens, table);
  prefix.Publish(tokens, table, "tenant-a");
  cache_->Free(table);
  for (const char* other : {"", "tenant-b"}) {
    BlockTable miss;
    EXPECT_EQ(prefix.Match(tokens, 11, miss, other), 0) << "salt '" << other << "'";
  }
  BlockTable hit;
  EXPECT_EQ(prefix.Match(tokens, 11, hit, "tenant-a"), 8);
  cache_->Free(hit);
}

TEST_F(PrefixCacheTest, DisabledOrAnotherModelFindsNothing) {
  PrefixCache prefix(cache_.get(), model_->fingerprint(), true);
  const std::vector<TokenId> tokens = Tokens(12, 12, 0);
  CacheOnce(prefix, tokens);
  ASSERT_EQ(cache_->pool().n_cached(), 3);
  EXPECT_EQ(prefix.Advertised(10).size(), 3u);

  PrefixCache other_model(cache_.get(), "another-fingerprint", true);
  BlockTable b;
  EXPECT_EQ(other_model.Match(tokens, 11, b), 0);
  EXPECT_EQ(b.n_blocks(), 0);

  PrefixCache off(cache_.get(), model_->fingerprint(), false);
  EXPECT_EQ(off.Match(tokens, 11, b), 0);
  EXPECT_TRUE(off.Advertised(10).empty());
  BlockTable c;
  PrefillRest(Tokens(12, 0, 3), c);
  off.Publish(Tokens(12, 0, 3), c);
  EXPECT_EQ(cache_->pool().n_cached(), 3);  // nothing new published
  cache_->Free(c);
}

// gemma3: five local layers of window 5 (each its own group: 5 and 1 have no larger common
// divisor), one global layer.
class WindowedPrefixCacheTest : public PrefixCacheTest {
 protected:
  void SetUp() override {
    Load({.seed = 3, .architecture = "gemma3", .n_layer = 6, .head_dim = 32, .sliding_window = 5,
          .n_ctx = 128});
  }
};

TEST_F(WindowedPrefixCacheTest, LocalLayersNeedOnlyTheBlocksTheirWindowSeesFromTheHitOn) {
  ASSERT_EQ(cache_->groups().windows, (std::vector<int32_t>{0, 5, 5, 5, 5, 5}));
  PrefixCache prefix(cache_.get(), model_->fingerprint(), true);
  const std::vector<TokenId> first = Tokens(18, 18, 0);
  const std::vector<TokenId> second = Tokens(23, 14, 7);  // shares 14 tokens: 3 full blocks
  BlockTable cold;
  const std::vector<float> cold_logits = PrefillRest(second, cold);
  cache_->Free(cold);
  CacheOnce(prefix, first);  // every group's 4 full blocks
  EXPECT_EQ(cache_->pool().n_cached(), 6 * 4);

  // Computing on from the hit (token 12), a local layer's queries see tokens 8.. (block 2 on).
  BlockTable b;
  EXPECT_EQ(prefix.Match(second, MaxCachedTokens(23, kBlockSize), b), 12);
  EXPECT_EQ(b.groups[0].size(), 3u);
  for (int32_t g = 1; g < 6; ++g) {
    ASSERT_EQ(b.groups[g].size(), 3u);
    EXPECT_EQ(b.groups[g][0], kNoBlock);
    EXPECT_EQ(b.groups[g][1], kNoBlock);
    EXPECT_NE(b.groups[g][2], kNoBlock);
  }
  EXPECT_TRUE(PrefillRest(second, b) == cold_logits) << "logits after a windowed hit differ";
  cache_->Free(b);

  // A decode worker's match: the first generated token's query (position 23) sees tokens 19..,
  // none of the hit's: only the global layer's blocks are taken.
  BlockTable c;
  EXPECT_EQ(prefix.Match(second, MaxCachedTokens(23, kBlockSize), c, "", 23), 12);
  EXPECT_EQ(cache_->HeldBlocks(c), 3);
  cache_->Free(c);
  EXPECT_EQ(cache_->pool().n_free(), cache_->pool().n_blocks());
}

TEST_F(WindowedPrefixCacheTest, AHitStopsWhereALocalLayersBlocksWereLetGo) {
  PrefixCache prefix(cache_.get(), model_->fingerprint(), true);
  const std::vector<TokenId> first = Tokens(18, 18, 0);
  BlockTable a;
  PrefillRest(first, a);
  ASSERT_TRUE(cache_->Reserve(a, 18).ok());  // the local layers let go of blocks 0..2
  prefix.Publish(first, a);
  cache_->Free(a);
  EXPECT_EQ(cache_->pool().n_cached(), 4 + 5 * 1);  // the global layer's 4, each local one's last

  // From a hit of 3 blocks a local layer would need block 2, of 2 block 1, of 1 block 0: gone.
  const std::vector<TokenId> second = Tokens(23, 14, 7);
  BlockTable b;
  EXPECT_EQ(prefix.Match(second, MaxCachedTokens(23, kBlockSize), b), 0);
  cache_->Free(b);
  // Where the queries start past the local layers' sight of the hit, the global blocks serve.
  BlockTable c;
  EXPECT_EQ(prefix.Match(second, MaxCachedTokens(23, kBlockSize), c, "", 23), 12);
  cache_->Free(c);
  EXPECT_EQ(cache_->pool().n_free(), cache_->pool().n_blocks());
}

}  // namespace
}  // namespace baton::engine
