// `--device` as a user meets it on the command line: a value that names no device is a usage
// error; a GPU this machine lacks fails at start-up saying so; `baton info` lists the GPUs.
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/backend_factory.h"
#include "tests/integration/local_cluster.h"

namespace baton {
namespace {

using testing::HasSubstr;

using test_support::CommandResult;
using test_support::RunBaton;

TEST(DeviceCliTest, AValueThatNamesNoDeviceIsAUsageError) {
  for (const std::string command :
       {"generate --prompt hi --device gpu", "perplexity --file /dev/null --device gpu",
        "bench engine --device gpu", "worker --device gpu"}) {
    const CommandResult r = RunBaton(command);
    EXPECT_EQ(r.exit_code, 2) << command << "\n" << r.output;
    EXPECT_THAT(r.output, HasSubstr("device \"gpu\": expected cpu, cuda or cuda:N")) << command;
  }
}

TEST(DeviceCliTest, AGpuThisMachineLacksFailsAtStartUpSayingWhy) {
  if (kernels::DescribeGpus().ok()) GTEST_SKIP() << "this machine has a GPU";
  for (const std::string command :
       {"generate --prompt hi --max-tokens 1 --device cuda", "bench engine --device cuda:0",
        "worker --port 0 --device cuda:0"}) {
    const CommandResult r = RunBaton(command);
    EXPECT_EQ(r.exit_code, 1) << command << "\n" << r.output;
    EXPECT_THAT(r.output, HasSubstr("--device cuda:0: ")) << command;
  }
}

TEST(DeviceCliTest, InfoListsTheGpusOrWhyThereAreNone) {
  const CommandResult r = RunBaton("info");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  if (kernels::DescribeGpus().ok()) {
    EXPECT_THAT(r.output, HasSubstr("  cuda:0 "));
  } else {
    EXPECT_THAT(r.output, HasSubstr("gpus: none ("));
  }
}

}  // namespace
}  // namespace baton
