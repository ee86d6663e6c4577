// `--kv-transport` as a user meets it: a value that names no transport is a usage error; NCCL
// asked for where there can be none (the KV cache in host memory) fails at start-up saying why;
// `bench handoff --transport` likewise.
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/integration/local_cluster.h"

namespace baton {
namespace {

using testing::HasSubstr;

using test_support::CommandResult;
using test_support::RunBaton;

TEST(KvTransportCliTest, AValueThatNamesNoTransportIsAUsageError) {
  for (const std::string command : {"worker --kv-transport rdma", "prefill --kv-transport rdma",
                                    "bench handoff --no-e2e --transport rdma"}) {
    const CommandResult r = RunBaton(command);
    EXPECT_EQ(r.exit_code, 2) << command << "\n" << r.output;
    EXPECT_THAT(r.output, HasSubstr("'rdma' is not one of auto, grpc, nccl")) << command;
  }
}

TEST(KvTransportCliTest, NcclForAWorkerWhoseKvIsInHostMemoryFailsAtStartUp) {
  for (const std::string command : {"prefill --port 0 --kv-transport nccl",
                                    "bench handoff --no-e2e --transport nccl"}) {
    const CommandResult r = RunBaton(command);
    EXPECT_EQ(r.exit_code, 1) << command << "\n" << r.output;
    EXPECT_THAT(r.output, HasSubstr("NCCL links need the KV cache on a GPU")) << command;
  }
}

}  // namespace
}  // namespace baton
