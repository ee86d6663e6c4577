#include "kvtransfer/chunk_buffer_pool.h"

#include <cstring>
#include <memory>

#include "gtest/gtest.h"

namespace baton::kvtransfer {
namespace {

TEST(ChunkBufferPoolTest, ABufferComesBackWhenItsSliceIsDroppedAndIsReused) {
  std::shared_ptr<ChunkBufferPool> pool = ChunkBufferPool::Create(1 << 16, 4);
  grpc_slice first = pool->Take(60000);
  ASSERT_EQ(GRPC_SLICE_LENGTH(first), 60000u);
  uint8_t* const memory = GRPC_SLICE_START_PTR(first);
  std::memset(memory, 7, 60000);  // writable, all of it
  EXPECT_EQ(pool->idle(), 0);
  grpc_slice_unref(first);
  EXPECT_EQ(pool->idle(), 1);
  grpc_slice second = pool->Take(1 << 16);
  EXPECT_EQ(GRPC_SLICE_START_PTR(second), memory);  // the same buffer again
  EXPECT_EQ(pool->idle(), 0);
  grpc_slice_unref(second);
}

TEST(ChunkBufferPoolTest, SmallAndOversizedRequestsAreNotPooled) {
  std::shared_ptr<ChunkBufferPool> pool = ChunkBufferPool::Create(1 << 16, 4);
  grpc_slice small = pool->Take(100);
  grpc_slice big = pool->Take((1 << 16) + 1);
  EXPECT_EQ(GRPC_SLICE_LENGTH(small), 100u);
  EXPECT_EQ(GRPC_SLICE_LENGTH(big), (1u << 16) + 1);
  grpc_slice_unref(small);
  grpc_slice_unref(big);
  EXPECT_EQ(pool->idle(), 0);
}

TEST(ChunkBufferPoolTest, KeepsAtMostMaxIdleBuffers) {
  std::shared_ptr<ChunkBufferPool> pool = ChunkBufferPool::Create(1 << 16, 2);
  grpc_slice slices[5];
  for (grpc_slice& s : slices) s = pool->Take(1 << 16);
  for (grpc_slice& s : slices) grpc_slice_unref(s);
  EXPECT_EQ(pool->idle(), 2);
}

TEST(ChunkBufferPoolTest, ALentBufferOutlivesThePoolsOwner) {
  std::shared_ptr<ChunkBufferPool> pool = ChunkBufferPool::Create(1 << 16, 2);
  grpc_slice slice = pool->Take(1 << 16);
  std::weak_ptr<ChunkBufferPool> weak = pool;
  pool.reset();
  EXPECT_FALSE(weak.expired());  // the lent buffer holds it
  GRPC_SLICE_START_PTR(slice)[0] = 1;
  grpc_slice_unref(slice);
  EXPECT_TRUE(weak.expired());
}

}  // namespace
}  // namespace baton::kvtransfer
