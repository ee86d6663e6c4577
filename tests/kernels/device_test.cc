// --device values (kernels/device.h) and the backend each one gets (kernels/backend_factory.h).
#include "kernels/device.h"

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/backend_factory.h"

namespace baton::kernels {
namespace {

using ::testing::HasSubstr;

TEST(DeviceTest, ParsesCpuCudaAndAnIndex) {
  absl::StatusOr<Device> cpu = ParseDevice("cpu");
  ASSERT_TRUE(cpu.ok());
  EXPECT_FALSE(cpu->is_cuda());
  EXPECT_EQ(cpu->ToString(), "cpu");
  absl::StatusOr<Device> cuda = ParseDevice("cuda");
  ASSERT_TRUE(cuda.ok());
  EXPECT_TRUE(cuda->is_cuda());
  EXPECT_EQ(cuda->index, 0);
  absl::StatusOr<Device> third = ParseDevice("cuda:2");
  ASSERT_TRUE(third.ok());
  EXPECT_EQ(third->index, 2);
  EXPECT_EQ(third->ToString(), "cuda:2");
}

TEST(DeviceTest, AnythingElseNamesTheAcceptedForms) {
  for (const char* bad : {"", "gpu", "CUDA", "cuda:", "cuda:-1", "cuda:x", "cuda:1.5", "cuda:99999",
                          "cpu:0", " cpu"}) {
    absl::StatusOr<Device> d = ParseDevice(bad);
    ASSERT_FALSE(d.ok()) << "'" << bad << "'";
    EXPECT_EQ(d.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(d.status().message(), HasSubstr("expected cpu, cuda or cuda:N"));
  }
}

TEST(BackendFactoryTest, CpuIsTheCpuBackend) {
  absl::StatusOr<std::unique_ptr<Backend>> b = CreateBackend(Device{}, {.n_threads = 1});
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_TRUE((*b)->host_memory());
}

// Without a GPU (or without the CUDA backend in this build) a CUDA device is refused at once,
// naming the device and why.
TEST(BackendFactoryTest, ACudaDeviceWithoutAGpuIsUnavailableAndSaysWhy) {
  absl::StatusOr<std::unique_ptr<Backend>> b =
      CreateBackend(Device{.kind = Device::Kind::kCuda, .index = 0}, {});
  if (b.ok()) GTEST_SKIP() << "a GPU is present: " << (*b)->name();
  EXPECT_EQ(b.status().code(), absl::StatusCode::kUnavailable) << b.status();
  EXPECT_THAT(b.status().message(), HasSubstr("--device cuda:0: "));
  absl::StatusOr<std::vector<std::string>> gpus = DescribeGpus();
  EXPECT_FALSE(gpus.ok());
  EXPECT_FALSE(gpus.status().message().empty());
}

TEST(BackendFactoryTest, AGpuIndexOutOfRangeIsInvalidArgument) {
  absl::StatusOr<std::vector<std::string>> gpus = DescribeGpus();
  if (!gpus.ok()) GTEST_SKIP() << "needs a CUDA GPU: " << gpus.status().message();
  const int past = static_cast<int>(gpus->size());
  absl::StatusOr<std::unique_ptr<Backend>> b =
      CreateBackend(Device{.kind = Device::Kind::kCuda, .index = past}, {});
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), absl::StatusCode::kInvalidArgument) << b.status();
}

}  // namespace
}  // namespace baton::kernels
