#include "engine/kv_cache.h"

#include <algorithm>

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
  EXPECT_EQ(t.blocks.size(), 3u);
  ASSERT_TRUE((*cache)->Reserve(t, 12).ok());  // still fits in 3 blocks
  EXPECT_EQ(t.blocks.size(), 3u);
  EXPECT_EQ((*cache)->pool().n_free(), 2);
  (*cache)->Free(t);
  EXPECT_TRUE(t.blocks.empty());
  EXPECT_EQ((*cache)->pool().n_free(), 5);
}

TEST(KvCacheTest, FailedReserveLeavesTableAndPoolUnchanged) {
  auto cache = KvCache::Create(SmallConfig(), {.block_size = 4, .n_blocks = 3}, HostBackend());
  ASSERT_TRUE(cache.ok());
  BlockTable t;
  ASSERT_TRUE((*cache)->Reserve(t, 4).ok());
  const std::vector<BlockId> before = t.blocks;
  absl::Status s = (*cache)->Reserve(t, 20);  // needs 5 blocks, 4 more
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(t.blocks, before);
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
  uint16_t* other = (*cache)->LayerBlock(1, t.blocks[1]);
  std::fill(other, other + 2 * block_elements, uint16_t{0x1234});
  const kernels::KvLayerView view = (*cache)->LayerView(2, t, 6);
  const int32_t position = 5;
  HostBackend().WriteKv(view, &position, 1, k.data(), v.data());
  // Position 5 is slot 1 of the table's second block; each kv head's 4 slots are contiguous.
  const uint16_t* block = (*cache)->LayerBlock(2, t.blocks[1]);
  for (int i = 0; i < c.kv_dim(); ++i) {
    const int64_t at = (i / c.head_dim * 4 + 1) * c.head_dim + i % c.head_dim;
    EXPECT_EQ(kernels::F16ToF32(block[at]), k[i]) << i;
    EXPECT_EQ(kernels::F16ToF32(block[block_elements + at]), v[i]) << i;
  }
  EXPECT_EQ(view.k_base + t.blocks[1] * view.block_stride, block);
  EXPECT_EQ(view.v_base + t.blocks[1] * view.block_stride, block + block_elements);
  EXPECT_EQ(view.n_tokens, 6);
  EXPECT_EQ(view.n_kv_head, 2);
  EXPECT_EQ(view.head_dim, 8);
  // The other layer's block of the same id is untouched.
  EXPECT_EQ(std::count(other, other + 2 * block_elements, uint16_t{0x1234}), 2 * block_elements);
}

TEST(KvCacheTest, RejectsBadOptions) {
  EXPECT_FALSE(
      KvCache::Create(SmallConfig(), {.block_size = 0, .n_blocks = 4}, HostBackend()).ok());
  EXPECT_FALSE(
      KvCache::Create(SmallConfig(), {.block_size = 16, .n_blocks = 0}, HostBackend()).ok());
}

}  // namespace
}  // namespace baton::engine
