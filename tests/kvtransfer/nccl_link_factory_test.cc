// NCCL links' start-up where there is nothing to link: a CPU worker, a machine without a GPU.
// The transfers themselves need GPUs: tests/cuda/nccl_link_test.cc.
#include "kvtransfer/nccl/nccl_link_factory.h"

#include <string>

#include "gtest/gtest.h"
#include "kernels/backend_factory.h"
#include "kernels/device.h"

namespace baton::kvtransfer {
namespace {

TEST(NcclLinkFactoryTest, ACpuWorkerHasNoLinksAndSaysWhy) {
  absl::StatusOr<std::unique_ptr<LinkFactory>> links =
      CreateNcclLinkFactory(*kernels::ParseDevice("cpu"));
  ASSERT_FALSE(links.ok());
  EXPECT_EQ(links.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(links.status().message().find("host memory"), std::string::npos) << links.status();
}

TEST(NcclLinkFactoryTest, AGpuWorkerHasLinksExactlyWhenTheMachineHasAGpu) {
  const bool has_gpu = kernels::DescribeGpus().ok();
  absl::StatusOr<std::unique_ptr<LinkFactory>> links =
      CreateNcclLinkFactory(*kernels::ParseDevice("cuda:0"));
  if (has_gpu) {
    // A GPU machine: NCCL may still be missing, but then the error says so.
    if (!links.ok()) {
      EXPECT_NE(links.status().message().find("NCCL"), std::string::npos) << links.status();
      GTEST_SKIP() << "a GPU without NCCL: no link factory to check (" << links.status() << ")";
    }
    EXPECT_EQ((*links)->kind(), "nccl");
    return;
  }
  ASSERT_FALSE(links.ok());
  EXPECT_EQ(links.status().code(), absl::StatusCode::kUnavailable) << links.status();
}

}  // namespace
}  // namespace baton::kvtransfer
