#include "kernels/cuda/device_info.h"

#include "gtest/gtest.h"

namespace baton::kernels::cuda {
namespace {

TEST(CudaDeviceInfoTest, CublasLinks) { EXPECT_GT(CublasVersion(), 0); }

TEST(CudaDeviceInfoTest, ListsDevicesWhenPresent) {
  auto devices = ListDevices();
  if (!devices.ok()) {
    GTEST_SKIP() << "needs a CUDA GPU: " << devices.status().message();
  }
  ASSERT_FALSE(devices->empty());
  for (const DeviceInfo& d : *devices) {
    EXPECT_FALSE(d.name.empty());
    EXPECT_GT(d.total_memory_bytes, 0u);
    EXPECT_GE(d.compute_capability_major, 7);
  }
}

}  // namespace
}  // namespace baton::kernels::cuda
