// The cluster file's `device:` key (cli/cluster_config.h): workers take it, the router does not,
// and a value that names no device is an error that says where; `quantize:`, checked alike; the
// router's `replicas:`; the workers' `tensor_parallel:`.
#include "cli/cluster_config.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/test_paths.h"

namespace baton::cli {
namespace {

using ::testing::HasSubstr;

TEST(ClusterConfigQuantizeTest, EveryProcessQuantizesAlike) {
  absl::StatusOr<ClusterConfig> c = ParseClusterConfig(
      "model: ckpt/\nquantize: Q4_K\nprefill: [{}]\ndecode: [{}]\n", "cluster.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->quantize, "Q4_K");
  c = ParseClusterConfig("model: ckpt/\nquantize: q3\nprefill: [{}]\ndecode: [{}]\n",
                         "cluster.yaml");
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(c.status().message(), HasSubstr("cluster.yaml:2: quantize: 'q3'"));
}

TEST(ClusterConfigRouterTest, RoutersRunAsReplicas) {
  absl::StatusOr<ClusterConfig> c = ParseClusterConfig(
      "router: {port: 7000, replicas: 2}\nprefill: [{}]\ndecode: [{}]\n", "cluster.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->router.replicas, 2);
  EXPECT_EQ(ParseClusterConfig("prefill: [{}]\ndecode: [{}]\n", "c.yaml")->router.replicas, 1);
  c = ParseClusterConfig("router:\n  replicas: 0\nprefill: [{}]\ndecode: [{}]\n",
                         "cluster.yaml");
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(c.status().message(),
              HasSubstr("cluster.yaml:2: router: replicas 0 is not within 1..16"));
  c = ParseClusterConfig("prefill: [{replicas: 2}]\ndecode: [{}]\n", "cluster.yaml");
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(c.status().message(), HasSubstr("unknown key 'replicas' in prefill[0]"));
}

TEST(ClusterConfigDeviceTest, WorkersTakeADevice) {
  absl::StatusOr<ClusterConfig> c = ParseClusterConfig(
      "prefill: [{device: cuda:1}]\ndecode: [{device: cpu}, {}]\n", "cluster.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->prefill[0].device, "cuda:1");
  EXPECT_EQ(c->decode[0].device, "cpu");
  EXPECT_EQ(c->decode[1].device, "");
}

TEST(ClusterConfigDeviceTest, ABadDeviceSaysWhereAndWhatIsAccepted) {
  absl::StatusOr<ClusterConfig> c =
      ParseClusterConfig("prefill: [{}]\ndecode: [{device: gpu0}]\n", "cluster.yaml");
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(c.status().message(), HasSubstr("cluster.yaml"));
  EXPECT_THAT(c.status().message(), HasSubstr("expected cpu, cuda or cuda:N"));
}

TEST(ClusterConfigDeviceTest, TheRouterHasNoDevice) {
  absl::StatusOr<ClusterConfig> c =
      ParseClusterConfig("router: {device: cuda}\nprefill: [{}]\ndecode: [{}]\n", "cluster.yaml");
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(c.status().message(), HasSubstr("unknown key 'device'"));
}

// The GPU cluster file in deploy/ parses, its workers on the GPUs it names.
TEST(ClusterConfigDeviceTest, TheGpuClusterFileInDeployParses) {
  absl::StatusOr<ClusterConfig> c =
      LoadClusterConfig(test_support::SourcePath("deploy/local/gpu.yaml"));
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_EQ(c->prefill.size(), 1u);
  EXPECT_EQ(c->prefill[0].device, "cuda:0");
  EXPECT_EQ(c->decode[0].device, "cuda:1");
}

// The mixed cluster file: prefill on the CPU, decode on a GPU.
TEST(ClusterConfigDeviceTest, TheMixedClusterFileInDeployParses) {
  absl::StatusOr<ClusterConfig> c =
      LoadClusterConfig(test_support::SourcePath("deploy/local/mixed.yaml"));
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_EQ(c->prefill.size(), 1u);
  ASSERT_EQ(c->decode.size(), 1u);
  EXPECT_EQ(c->prefill[0].device, "cpu");
  EXPECT_EQ(c->decode[0].device, "cuda:0");
}

TEST(ClusterConfigTensorParallelTest, WorkersTakeASizeWithinBounds) {
  absl::StatusOr<ClusterConfig> c = ParseClusterConfig(
      "prefill: [{tensor_parallel: 4}]\ndecode: [{tensor_parallel: 2}, {}]\n", "cluster.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->prefill[0].tensor_parallel, 4);
  EXPECT_EQ(c->decode[0].tensor_parallel, 2);
  EXPECT_EQ(c->decode[1].tensor_parallel, 1);
  c = ParseClusterConfig("prefill: [{}]\ndecode: [{tensor_parallel: 0}]\n", "cluster.yaml");
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(c.status().message(),
              HasSubstr("cluster.yaml:2: decode[0]: tensor_parallel 0 is not within 1..64"));
  c = ParseClusterConfig("router: {tensor_parallel: 2}\nprefill: [{}]\ndecode: [{}]\n",
                         "cluster.yaml");
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(c.status().message(), HasSubstr("unknown key 'tensor_parallel'"));
}

}  // namespace
}  // namespace baton::cli
