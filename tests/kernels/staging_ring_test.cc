// IndexUploader's staging ring, without a GPU: a stand-in memory runs its "stream" only when
// waited for, as a GPU would run it later, with each copy reading the staging bytes as they are
// then; each upload is followed by a "kernel" that checks the device bytes it was given. A slice
// overwritten before its copy ran, a reused upload whose slice was overwritten, or growth that
// lost a slice all show as a kernel reading the wrong bytes.
#include "kernels/cuda/staging_ring.h"

#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace baton::kernels::cuda {
namespace {

class StreamMemory : public StagingRing::Memory {
 public:
  void WaitIdle() override {
    ++waits_;
    for (const Op& op : stream_) {
      if (op.is_copy) {
        std::memcpy(device_.data() + op.offset, staging_.data() + op.offset, op.bytes.size());
      } else if (std::memcmp(device_.data() + op.offset, op.bytes.data(), op.bytes.size()) != 0) {
        ++bad_reads_;
        ADD_FAILURE() << "a kernel read other bytes than its upload's at offset " << op.offset;
      }
    }
    stream_.clear();
  }

  uint8_t* Reallocate(size_t bytes) override {
    EXPECT_TRUE(stream_.empty()) << "buffers replaced while the stream may still read them";
    ++reallocations_;
    staging_.assign(bytes, 0xcd);  // fresh memory holds garbage
    device_.assign(bytes, 0xab);
    return staging_.data();
  }

  void EnqueueCopy(size_t offset, size_t bytes) override {
    EXPECT_LE(offset + bytes, staging_.size());
    stream_.push_back({.is_copy = true, .offset = offset, .bytes = std::vector<uint8_t>(bytes)});
    ++copies_;
  }

  // A kernel enqueued after an upload, reading what the upload holds.
  void EnqueueRead(size_t offset, const std::vector<uint8_t>& expected) {
    ASSERT_LE(offset + expected.size(), device_.size());
    stream_.push_back({.is_copy = false, .offset = offset, .bytes = expected});
  }

  int waits_ = 0;
  int reallocations_ = 0;
  int copies_ = 0;
  int bad_reads_ = 0;

 private:
  struct Op {
    bool is_copy;
    size_t offset;
    std::vector<uint8_t> bytes;  // a read's expected bytes; a copy's length
  };
  std::vector<uint8_t> staging_, device_;
  std::vector<Op> stream_;
};

std::vector<uint8_t> Bytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> bytes(n);
  for (uint8_t& b : bytes) b = static_cast<uint8_t>(rng());
  return bytes;
}

// Uploads `bytes` and enqueues a kernel that reads them; the offset.
size_t UploadAndRead(StagingRing& ring, StreamMemory& memory, const std::vector<uint8_t>& bytes) {
  const size_t offset = ring.Upload(bytes.data(), bytes.size());
  EXPECT_EQ(offset % StagingRing::kAlignment, 0u);
  memory.EnqueueRead(offset, bytes);
  return offset;
}

TEST(StagingRingTest, ManyUploadsWrapOnlyAfterTheStreamRanAndEveryKernelReadsItsOwn) {
  StreamMemory memory;
  StagingRing ring(memory, 8192);
  std::mt19937 rng(7);
  for (uint32_t i = 0; i < 2000; ++i) {
    UploadAndRead(ring, memory, Bytes(1 + rng() % 1500, i));
  }
  memory.WaitIdle();
  EXPECT_EQ(memory.bad_reads_, 0);
  EXPECT_GT(memory.waits_, 100) << "the ring should have wrapped many times";
  EXPECT_EQ(memory.reallocations_, 1) << "no upload was larger than the ring";
}

TEST(StagingRingTest, AnIdenticalRecentUploadIsReusedWithoutACopy) {
  StreamMemory memory;
  StagingRing ring(memory, 1 << 16);
  const std::vector<uint8_t> table = Bytes(300, 1);
  const size_t first = UploadAndRead(ring, memory, table);
  UploadAndRead(ring, memory, Bytes(300, 2));
  const int copies = memory.copies_;
  EXPECT_EQ(UploadAndRead(ring, memory, table), first);
  EXPECT_EQ(memory.copies_, copies);
  // Same size, one byte different: copied.
  std::vector<uint8_t> changed = table;
  changed[299] ^= 1;
  EXPECT_NE(UploadAndRead(ring, memory, changed), first);
  EXPECT_EQ(memory.copies_, copies + 1);
  memory.WaitIdle();
  EXPECT_EQ(memory.bad_reads_, 0);
}

TEST(StagingRingTest, OnlyTheLastFewUploadsAreRemembered) {
  StreamMemory memory;
  StagingRing ring(memory, 1 << 16);
  const std::vector<uint8_t> table = Bytes(64, 1);
  const size_t first = UploadAndRead(ring, memory, table);
  for (uint32_t i = 0; i < StagingRing::kRecentUploads; ++i) {
    UploadAndRead(ring, memory, Bytes(64, 100 + i));
  }
  EXPECT_NE(UploadAndRead(ring, memory, table), first);
  memory.WaitIdle();
  EXPECT_EQ(memory.bad_reads_, 0);
}

TEST(StagingRingTest, AWrapForgetsTheRecentUploads) {
  // The first slice is overwritten after the wrap: reusing it would hand a kernel other bytes.
  StreamMemory memory;
  StagingRing ring(memory, 4 * StagingRing::kAlignment);
  const std::vector<uint8_t> table = Bytes(200, 1);
  EXPECT_EQ(UploadAndRead(ring, memory, table), 0u);
  UploadAndRead(ring, memory, Bytes(600, 2));  // fills the ring to its end
  EXPECT_EQ(memory.waits_, 0);
  EXPECT_EQ(UploadAndRead(ring, memory, Bytes(200, 3)), 0u);  // wraps: overwrites table's slice
  EXPECT_EQ(memory.waits_, 1);
  const int copies = memory.copies_;
  EXPECT_EQ(UploadAndRead(ring, memory, table), StagingRing::kAlignment);
  EXPECT_EQ(memory.copies_, copies + 1);
  memory.WaitIdle();
  EXPECT_EQ(memory.bad_reads_, 0);
}

TEST(StagingRingTest, AnUploadLargerThanTheRingGrowsItAfterTheStreamRan) {
  StreamMemory memory;
  StagingRing ring(memory, 1024);
  UploadAndRead(ring, memory, Bytes(100, 1));
  const std::vector<uint8_t> big = Bytes(5000, 2);
  EXPECT_EQ(UploadAndRead(ring, memory, big), 0u);
  EXPECT_EQ(memory.reallocations_, 2);
  EXPECT_GE(ring.capacity(), 5000u);
  EXPECT_EQ(memory.waits_, 1) << "the old buffers were freed while the stream could read them";
  UploadAndRead(ring, memory, Bytes(100, 3));
  memory.WaitIdle();
  EXPECT_EQ(memory.bad_reads_, 0);
}

TEST(StagingRingTest, EmptyUploadsTakeASliceAndCopyNothing) {
  StreamMemory memory;
  StagingRing ring(memory, 1024);
  EXPECT_EQ(ring.Upload(nullptr, 0), 0u);
  EXPECT_EQ(ring.Upload(nullptr, 0), StagingRing::kAlignment);
  EXPECT_EQ(memory.copies_, 0);
}

TEST(StagingRingTest, ARestartReplaysTheSameOffsetsAndStageOnlyCopiesNothing) {
  StreamMemory memory;
  StagingRing ring(memory, 1 << 16);
  std::vector<size_t> recorded;
  for (uint32_t i = 0; i < 5; ++i) recorded.push_back(ring.Upload(Bytes(100 * i + 1, i).data(),
                                                                   100 * i + 1));
  ring.Restart();
  EXPECT_EQ(ring.used(), 0u);
  ring.set_stage_only(true);
  const int copies = memory.copies_;
  for (uint32_t i = 0; i < 5; ++i) {
    // Other bytes of the same sizes (the next step's positions), at the recorded offsets.
    EXPECT_EQ(ring.Upload(Bytes(100 * i + 1, 50 + i).data(), 100 * i + 1), recorded[i]);
  }
  EXPECT_EQ(memory.copies_, copies);
}

TEST(StagingRingDeathTest, AWrapWhileARecordedStepMayNotMoveEndsTheProcess) {
  StreamMemory memory;
  StagingRing ring(memory, 1024);
  ring.set_may_wrap(false);
  ring.Upload(Bytes(1000, 1).data(), 1000);
  EXPECT_DEATH(ring.Upload(Bytes(100, 2).data(), 100), "outgrew the 1024-byte staging ring");
}

}  // namespace
}  // namespace baton::kernels::cuda
