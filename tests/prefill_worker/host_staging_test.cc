// HostStagingPool on a backend whose memory is not the host's and whose copies land late (or
// fail): the staged bytes are the device's once `ready` has passed, buffers are reused, idle
// memory stays under its cap, and a failed copy says why.
#include "prefill_worker/host_staging.h"

#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/backend.h"
#include "tests/support/own_memory_backend.h"

namespace baton::prefill_worker {
namespace {

using namespace std::chrono_literals;

constexpr size_t kBlockBytes = 3000;

class HostStagingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    backend_ = std::make_unique<test_support::OwnMemoryBackend>(
        kernels::CreateCpuBackend({.n_threads = 1}));
    backend_->set_copy_delay(20ms);
    // Eight "device" blocks with distinct bytes.
    for (int b = 0; b < 8; ++b) {
      device_.emplace_back(kBlockBytes);
      for (size_t i = 0; i < kBlockBytes; ++i) device_.back()[i] = static_cast<uint8_t>(b * 31 + i);
    }
  }

  std::vector<const uint8_t*> Blocks(std::initializer_list<int> ids) const {
    std::vector<const uint8_t*> blocks;
    for (int id : ids) blocks.push_back(device_[id].data());
    return blocks;
  }

  static std::chrono::system_clock::time_point In(std::chrono::milliseconds ms) {
    return std::chrono::system_clock::now() + ms;
  }

  std::unique_ptr<test_support::OwnMemoryBackend> backend_;
  std::vector<std::vector<uint8_t>> device_;
};

TEST_F(HostStagingTest, StagedBlocksHoldTheDevicesBytesOnceReady) {
  HostStagingPool pool(*backend_, 1 << 20);
  auto staged = pool.Stage(Blocks({5, 0, 3}), kBlockBytes);
  ASSERT_TRUE(staged.ok()) << staged.status();
  ASSERT_TRUE((*staged)->ready()(In(30000ms)).ok());
  const std::vector<int> ids = {5, 0, 3};
  ASSERT_EQ((*staged)->blocks().size(), 3u);
  for (size_t i = 0; i < ids.size(); ++i) {
    EXPECT_EQ(std::memcmp((*staged)->blocks()[i], device_[ids[i]].data(), kBlockBytes), 0) << i;
  }
  EXPECT_EQ(backend_->bytes_to_host(), 3 * kBlockBytes);
}

TEST_F(HostStagingTest, ACopyNotLandedByTheDeadlineIsDeadlineExceeded) {
  backend_->set_copy_delay(500ms);
  HostStagingPool pool(*backend_, 1 << 20);
  auto staged = pool.Stage(Blocks({1}), kBlockBytes);
  ASSERT_TRUE(staged.ok()) << staged.status();
  EXPECT_EQ((*staged)->ready()(In(10ms)).code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_TRUE((*staged)->ready()(In(30000ms)).ok());  // the copy went on
}

TEST_F(HostStagingTest, BuffersAreReusedAndIdleMemoryStaysUnderItsCap) {
  HostStagingPool pool(*backend_, 256 << 10);
  const void* first = nullptr;
  {
    auto staged = pool.Stage(Blocks({0, 1, 2}), kBlockBytes);
    ASSERT_TRUE(staged.ok());
    first = (*staged)->blocks()[0];
  }
  EXPECT_EQ(pool.idle_bytes(), size_t{64} << 10);  // the smallest buffer, kept
  {
    // A smaller layer takes the same buffer, and it is the only one idle again afterwards.
    auto staged = pool.Stage(Blocks({4}), kBlockBytes);
    ASSERT_TRUE(staged.ok());
    EXPECT_EQ((*staged)->blocks()[0], first);
    EXPECT_EQ(pool.idle_bytes(), 0u);
  }
  EXPECT_EQ(pool.idle_bytes(), size_t{64} << 10);
  {
    // Two at once: one new buffer; both kept (128 KiB <= 256 KiB).
    auto a = pool.Stage(Blocks({1}), kBlockBytes);
    auto b = pool.Stage(Blocks({2}), kBlockBytes);
    ASSERT_TRUE(a.ok() && b.ok());
    EXPECT_NE((*a)->blocks()[0], (*b)->blocks()[0]);
  }
  EXPECT_EQ(pool.idle_bytes(), size_t{128} << 10);
  {
    // A layer larger than the cap gets a buffer of its own, freed when it goes.
    std::vector<const uint8_t*> many(100, device_[0].data());
    auto big = pool.Stage(many, kBlockBytes);
    ASSERT_TRUE(big.ok());
    ASSERT_TRUE((*big)->ready()(In(30000ms)).ok());
  }
  EXPECT_EQ(pool.idle_bytes(), size_t{128} << 10);
}

TEST_F(HostStagingTest, AFailedCopyFailsReadyWithItsReasonAndReturnsTheBuffer) {
  backend_->fail_copies(absl::InternalError("cuda:0: copy to the host failed: test"));
  HostStagingPool pool(*backend_, 1 << 20);
  {
    auto staged = pool.Stage(Blocks({2, 3}), kBlockBytes);
    ASSERT_TRUE(staged.ok());
    const absl::Status ready = (*staged)->ready()(In(30000ms));
    EXPECT_EQ(ready.code(), absl::StatusCode::kInternal);
    EXPECT_NE(ready.message().find("copy to the host failed"), std::string::npos) << ready;
  }
  EXPECT_EQ(pool.idle_bytes(), size_t{64} << 10);
}

TEST_F(HostStagingTest, NoHostMemoryIsResourceExhausted) {
  HostStagingPool pool(*backend_, 1 << 20);
  std::vector<const uint8_t*> blocks(1, device_[0].data());
  auto staged = pool.Stage(blocks, size_t{1} << 62);
  EXPECT_EQ(staged.status().code(), absl::StatusCode::kResourceExhausted);
}

}  // namespace
}  // namespace baton::prefill_worker
