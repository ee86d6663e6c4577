// A decode worker that freezes mid-stream (SIGSTOP: its sockets stay open, it answers nothing):
// the client's stream fails with UNAVAILABLE naming the worker, through gRPC keepalive, long
// before the request's deadline; once the worker resumes, every block it held is freed.
#include <signal.h>

#include <chrono>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/integration/local_cluster.h"

namespace baton {
namespace {

using ::testing::HasSubstr;

TEST(FrozenWorkerTest, StreamsOfAFrozenDecodeWorkerFailWithUnavailable) {
  test_support::LocalCluster cluster({}, {});
  ASSERT_TRUE(cluster.StartRouter().ok());
  absl::StatusOr<test_support::Proc*> prefill = cluster.StartWorker("prefill");
  absl::StatusOr<test_support::Proc*> decode = cluster.StartWorker("decode");
  ASSERT_TRUE(prefill.ok() && decode.ok());
  ASSERT_TRUE(cluster.WaitHealthy(2).ok());

  v1::GenerateRequest request;
  request.set_prompt("Count from one to a thousand:");
  request.mutable_sampling()->set_max_tokens(1000);
  request.mutable_sampling()->set_ignore_eos(true);
  auto stub = cluster.RouterStub();
  grpc::ClientContext context;
  // Waiting out this deadline would end in DEADLINE_EXCEEDED, not UNAVAILABLE.
  cluster.Prepare(context, std::chrono::seconds(300));
  std::unique_ptr<grpc::ClientReader<v1::GenerateResponse>> reader =
      stub->Generate(&context, request);
  v1::GenerateResponse message;
  ASSERT_TRUE(reader->Read(&message));
  ASSERT_TRUE(reader->Read(&message));  // a token from the decode worker: it is streaming
  (*decode)->process->Signal(SIGSTOP);
  while (reader->Read(&message)) {
  }
  const grpc::Status status = reader->Finish();
  (*decode)->process->Signal(SIGCONT);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAVAILABLE) << status.error_message();
  EXPECT_THAT(status.error_message(), HasSubstr((*decode)->address));
  EXPECT_EQ(cluster.WaitEveryWorkerFree(std::chrono::seconds(60)), absl::OkStatus());
}

}  // namespace
}  // namespace baton
