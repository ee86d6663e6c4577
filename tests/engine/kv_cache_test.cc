#include "engine/kv_cache.h"

#include <algorithm>

#include "engine/kv_budget.h"
#include "gtest/gtest.h"
#include "kernels/backend.h"
#include "kernels/half.h"

namespace baton::engine {
namespace {

// The CPU backend whose memory the caches take.
kernels::Backend& HostBackend() {
  static kernels::Backend* backend = kernels::CreateCpuBackend({.reference = true}).release();
  return *backend;
}

ModelConfig SmallConfig() {
  ModelConfig c;
  c.n_layer = 3;
  c.n_head = 4;
  c.n_head_kv = 2;
  c.head_dim = 8;
  c.n_embd = 32;
  return c;
}

TEST(KvCacheTest, ReserveGrowsByWholeBlocksAndFreeReturnsAll) {
  auto cache = KvCache::Create(SmallConfig(), {.block_size = 4, .n_blocks = 5}, HostBackend());
  ASSERT_TRUE(cache.ok());
  BlockTable t;
  EXPECT_EQ((*cache)->BlocksNeeded(t, 9), 3);
  ASSERT_TRUE((*cache)->Reserve(t, 9).ok());
  EXPECT_EQ(t.groups[0].size(), 3u);
  ASSERT_TRUE((*cache)->Reserve(t, 12).ok());  // still fits in 3 blocks
  EXPECT_EQ(t.groups[0].size(), 3u);
  EXPECT_EQ((*cache)->pool().n_free(), 2);
  (*cache)->Free(t);
  EXPECT_EQ(t.n_blocks(), 0);
  EXPECT_EQ((*cache)->pool().n_free(), 5);
}

// Four layers: 0 and 1 see the last 8 tokens, 2 and 3 every token.
ModelConfig WindowedConfig() {
  ModelConfig c = SmallConfig();
  c.n_layer = 4;
  c.layers.resize(4);
  c.layers[0].attention.window = 8;
  c.layers[1].attention.window = 8;
  return c;
}

TEST(KvLayerGroupsTest, LayersOfOneWindowShareGroupsOfEqualSize) {
  // Gemma 3 270M: every sixth layer global, the others a window of 512.
  std::vector<int32_t> gemma(18, 512);
  for (int l : {5, 11, 17}) gemma[l] = 0;
  const KvLayerGroups g = GroupLayersByWindow(gemma);
  EXPECT_EQ(g.layers_per_group, 3);
  EXPECT_EQ(g.windows, (std::vector<int32_t>{0, 512, 512, 512, 512, 512}));
  EXPECT_EQ(g.group_of[5], 0);
  EXPECT_EQ(g.slot_of[11], 1);
  EXPECT_EQ(g.group_of[0], 1);
  EXPECT_EQ(g.group_of[3], 2);  // local layers 0 1 2 | 3 4 6 | ...
  EXPECT_EQ(g.group_of[6], 2);
  EXPECT_EQ(g.slot_of[6], 2);
  // Gemma 3 1B: 4 global layers of 26: groups of 2.
  std::vector<int32_t> gemma_1b(26, 512);
  for (int l : {5, 11, 17, 23}) gemma_1b[l] = 0;
  EXPECT_EQ(GroupLayersByWindow(gemma_1b).layers_per_group, 2);
  EXPECT_EQ(GroupLayersByWindow(gemma_1b).n_groups(), 13);
  // No window: one group of every layer.
  const KvLayerGroups plain = GroupLayersByWindow(std::vector<int32_t>(5, 0));
  EXPECT_EQ(plain.layers_per_group, 5);
  EXPECT_EQ(plain.windows, std::vector<int32_t>{0});
  EXPECT_EQ(plain.slot_of[4], 4);
}

TEST(KvCacheTest, AWindowedGroupHoldsOnlyTheBlocksItsWindowStillSees) {
  auto cache = KvCache::Create(WindowedConfig(), {.block_size = 4, .n_blocks = 20}, HostBackend());
  ASSERT_TRUE(cache.ok());
  KvCache& kv = **cache;
  ASSERT_EQ(kv.groups().windows, (std::vector<int32_t>{0, 8}));
  BlockTable t;
  ASSERT_TRUE(kv.Reserve(t, 20).ok());  // queries from position 0: every block
  EXPECT_EQ(kv.HeldBlocks(t), 10);
  t.n_tokens = 18;  // as if written; the next query at 18 sees tokens 11..18
  EXPECT_EQ(kv.BlocksNeeded(t, 24), 2);  // block 5 of each group (the window's old ones freed)
  ASSERT_TRUE(kv.Reserve(t, 20).ok());
  EXPECT_EQ(t.groups[1], (std::vector<BlockId>{kNoBlock, kNoBlock, t.groups[1][2],
                                               t.groups[1][3], t.groups[1][4]}));
  EXPECT_EQ(kv.HeldBlocks(t), 8);
  EXPECT_EQ(kv.pool().n_free(), 12);
  const kernels::KvLayerView local = kv.LayerView(0, t, 19);
  EXPECT_EQ(local.window, 8);
  EXPECT_EQ(local.block_table, t.groups[1].data());
  EXPECT_EQ(kv.LayerView(3, t, 19).window, 0);
  EXPECT_EQ(kv.FirstHeldBlock(1, 18), 2);
  EXPECT_EQ(kv.FirstHeldBlock(2, 18), 0);
  // Back below where the windowed group already let go: nothing left to serve from.
  EXPECT_EQ(kv.Truncate(t, 10, 0), 0);
  EXPECT_EQ(t.n_blocks(), 0);
  EXPECT_EQ(kv.pool().n_free(), 20);
}

TEST(KvCacheTest, ReserveRefillsTheBlocksAWindowLetGoWhenQueriesStartOverBeforeThem) {
  auto cache = KvCache::Create(WindowedConfig(), {.block_size = 4, .n_blocks = 20}, HostBackend());
  ASSERT_TRUE(cache.ok());
  KvCache& kv = **cache;
  EXPECT_EQ(kv.MaxSequenceTokens(), 40);  // 20 blocks, 2 groups of 4-token blocks
  BlockTable t;
  ASSERT_TRUE(kv.Reserve(t, 20).ok());
  t.n_tokens = 18;
  ASSERT_TRUE(kv.Reserve(t, 20).ok());  // the windowed group lets go of blocks 0 and 1
  EXPECT_EQ(kv.Truncate(t, 0, t.n_blocks()), 0);  // nothing written: nothing lost
  EXPECT_EQ(t.n_blocks(), 5);
  EXPECT_EQ(kv.BlocksNeeded(t, 8), 2);
  ASSERT_TRUE(kv.Reserve(t, 8).ok());
  EXPECT_NE(t.groups[1][0], kNoBlock);
  EXPECT_NE(t.groups[1][1], kNoBlock);
  EXPECT_EQ(kv.HeldBlocks(t), 10);
  kv.Free(t);
  EXPECT_EQ(kv.pool().n_free(), 20);
}

TEST(KvCacheTest, AnAdmissionHoldsWhatTheRouterCounts) {
  auto cache = KvCache::Create(WindowedConfig(), {.block_size = 4, .n_blocks = 20}, HostBackend());
  ASSERT_TRUE(cache.ok());
  KvCache& kv = **cache;
  // A prompt of 21 tokens and room for 9 more: the first generated token's query at 21 sees
  // tokens 14.., so the windowed group takes blocks 3..7.
  BlockTable t;
  ASSERT_TRUE(kv.Reserve(t, 30, 21).ok());
  EXPECT_EQ(kv.HeldBlocks(t), 8 + 5);
  EXPECT_EQ(KvBlocksAtAdmission(21, 30, 4, kv.groups().windows), 13);
  EXPECT_EQ(KvBlocksAtAdmission(21, 30, 4, {}), 8);
  kv.Free(t);
  // A block holds one group's K and V: 2 layers x 4 tokens x 16 values x 2 x 2 bytes.
  EXPECT_EQ(KvCache::BlocksForBytes(WindowedConfig(), 4, 5120), 10);
  EXPECT_EQ(KvCache::BlocksForBytes(SmallConfig(), 4, 5120), 6);  // one group of 3 layers
}

TEST(KvCacheTest, FailedReserveLeavesTableAndPoolUnchanged) {
  auto cache = KvCache::Create(SmallConfig(), {.block_size = 4, .n_blocks = 3}, HostBackend());
  ASSERT_TRUE(cache.ok());
  BlockTable t;
  ASSERT_TRUE((*cache)->Reserve(t, 4).ok());
  const std::vector<BlockId> before = t.groups[0];
  absl::Status s = (*cache)->Reserve(t, 20);  // needs 5 blocks, 4 more
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(t.groups[0], before);
  EXPECT_EQ((*cache)->pool().n_free(), 2);
}

TEST(KvCacheTest, TheLayerViewWritesIntoTheLayerBlockKThenV) {
  const ModelConfig c = SmallConfig();
  auto cache = KvCache::Create(c, {.block_size = 4, .n_blocks = 4}, HostBackend());
  ASSERT_TRUE(cache.ok());
  BlockTable t;
  ASSERT_TRUE((*cache)->Reserve(t, 8).ok());
  std::vector<float> k(c.kv_dim()), v(c.kv_dim());
  for (int i = 0; i < c.kv_dim(); ++i) {
    k[i] = static_cast<float>(i);
    v[i] = -static_cast<float>(i);
  }
  // What a block holds before it is written is undefined: mark another layer's block of the same id.
  const int64_t block_elements = int64_t{4} * c.kv_dim();
  uint16_t* other = (*cache)->LayerBlock(1, t.groups[0][1]);
  std::fill(other, other + 2 * block_elements, uint16_t{0x1234});
  const kernels::KvLayerView view = (*cache)->LayerView(2, t, 6);
  const int32_t position = 5;
  HostBackend().WriteKv(view, &position, 1, k.data(), v.data());
  // Position 5 is slot 1 of the table's second block; each kv head's 4 slots are contiguous.
  const uint16_t* block = (*cache)->LayerBlock(2, t.groups[0][1]);
  for (int i = 0; i < c.kv_dim(); ++i) {
    const int64_t at = (i / c.head_dim * 4 + 1) * c.head_dim + i % c.head_dim;
    EXPECT_EQ(kernels::F16ToF32(block[at]), k[i]) << i;
    EXPECT_EQ(kernels::F16ToF32(block[block_elements + at]), v[i]) << i;
  }
  EXPECT_EQ(view.k_base + t.groups[0][1] * view.block_stride, block);
  EXPECT_EQ(view.v_base + t.groups[0][1] * view.block_stride, block + block_elements);
  EXPECT_EQ(view.n_tokens, 6);
  EXPECT_EQ(view.n_kv_head, 2);
  EXPECT_EQ(view.head_dim, 8);
  // The other layer's block of the same id is untouched.
  EXPECT_EQ(std::count(other, other + 2 * block_elements, uint16_t{0x1234}), 2 * block_elements);
}

// Latent attention reads V from K: its cache stores K alone, in blocks of half the bytes, and
// its layer views give V K's base.
TEST(KvCacheTest, ALatentAttentionCacheHoldsKAlone) {
  ModelConfig c = SmallConfig();
  c.n_head_kv = 1;
  c.layers.assign(c.n_layer, LayerSpec{});
  const int64_t two_planes = KvCache::BlockBytes(c, 4);
  for (LayerSpec& layer : c.layers) layer.attention.latent.kv_rank = 4;
  EXPECT_EQ(c.kv_planes(), 1);
  EXPECT_EQ(KvCache::BlockBytes(c, 4), two_planes / 2);
  auto cache = KvCache::Create(c, {.block_size = 4, .n_blocks = 4}, HostBackend());
  ASSERT_TRUE(cache.ok());
  EXPECT_EQ((*cache)->layer_block_elements(), 4 * c.kv_dim());
  BlockTable t;
  ASSERT_TRUE((*cache)->Reserve(t, 8).ok());
  const kernels::KvLayerView view = (*cache)->LayerView(1, t, 8);
  EXPECT_EQ(view.v_base, view.k_base);
  EXPECT_EQ(view.block_stride, 4 * c.kv_dim());
  EXPECT_EQ(view.k_base + t.groups[0][1] * view.block_stride,
            (*cache)->LayerBlock(1, t.groups[0][1]));
}

TEST(KvCacheTest, RejectsBadOptions) {
  EXPECT_FALSE(
      KvCache::Create(SmallConfig(), {.block_size = 0, .n_blocks = 4}, HostBackend()).ok());
  EXPECT_FALSE(
      KvCache::Create(SmallConfig(), {.block_size = 16, .n_blocks = 0}, HostBackend()).ok());
}

}  // namespace
}  // namespace baton::engine
