// A worker built by the library `baton decode` uses (worker/worker_server.h), in process: the
// capacity policy it reports to routers, and the shared-token check that gRPC applies before any
// handler runs (an unauthenticated call changes nothing; probes need no token).
#include "worker/worker_server.h"

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "baton/v1/worker.grpc.pb.h"
#include "engine/synthetic_model.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "rpc/server_options.h"
#include "tests/support/temp_path.h"

namespace baton::worker {
namespace {

constexpr char kToken[] = "s3cret";

class WorkerServerTest : public testing::Test {
 protected:
  void SetUp() override {
    const std::string path = test_support::TempPath("worker-server.gguf");
    ASSERT_TRUE(engine::WriteSyntheticModel(path, {.seed = 5}).ok());
    WorkerOptions options;
    options.role = v1::WORKER_ROLE_DECODE;
    options.model_path = path;
    options.server.auth_token = kToken;
    options.n_threads = 1;
    options.kv_cache_bytes = 1 << 20;
    options.kv_reserve_ahead = 7;
    absl::StatusOr<std::unique_ptr<WorkerServer>> server = WorkerServer::Start(options);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    absl::StatusOr<std::shared_ptr<grpc::Channel>> channel =
        rpc::MakeChannel(server_->address(), {});
    ASSERT_TRUE(channel.ok()) << channel.status();
    channel_ = *std::move(channel);
  }

  grpc::Status Status(const std::string& token, v1::StatusResponse* response) {
    grpc::ClientContext context;
    rpc::PrepareContext(context, {.auth_token = token}, Deadline());
    return v1::DecodeWorker::NewStub(channel_)->Status(&context, {}, response);
  }

  static std::chrono::system_clock::time_point Deadline() {
    return std::chrono::system_clock::now() + std::chrono::seconds(30);
  }

  std::unique_ptr<WorkerServer> server_;
  std::shared_ptr<grpc::Channel> channel_;
};

TEST_F(WorkerServerTest, ReportsItsReserveAheadPolicy) {
  v1::StatusResponse status;
  ASSERT_TRUE(Status(kToken, &status).ok());
  EXPECT_EQ(status.model().kv_reserve_ahead_tokens(), 7);
  EXPECT_GT(status.model().block_size(), 0);
}

TEST_F(WorkerServerTest, CallsWithoutTheTokenNeverReachAHandler) {
  v1::StatusResponse before;
  ASSERT_TRUE(Status(kToken, &before).ok());
  for (const std::string& token : {std::string(), std::string("wrong")}) {
    grpc::ClientContext context;
    rpc::PrepareContext(context, {.auth_token = token}, Deadline());
    v1::ReserveRequest request;
    request.set_request_id("intruder");
    request.set_n_prompt_tokens(16);
    request.set_max_tokens(16);
    request.set_lease_ms(60000);
    request.set_model_fingerprint(before.model().fingerprint());
    v1::ReserveResponse response;
    const grpc::Status status =
        v1::DecodeWorker::NewStub(channel_)->Reserve(&context, request, &response);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAUTHENTICATED) << "token '" << token << "'";
    EXPECT_TRUE(response.reservation_id().empty());
  }
  v1::StatusResponse unauthenticated;
  EXPECT_EQ(Status("", &unauthenticated).error_code(), grpc::StatusCode::UNAUTHENTICATED);
  v1::StatusResponse after;
  ASSERT_TRUE(Status(kToken, &after).ok());
  EXPECT_EQ(after.load().reservations(), 0);
  EXPECT_EQ(after.load().kv_blocks_free(), before.load().kv_blocks_free());
}

TEST_F(WorkerServerTest, AReserveWhosePromptTokensDisagreeWithItsLengthIsRefused) {
  v1::StatusResponse before;
  ASSERT_TRUE(Status(kToken, &before).ok());
  grpc::ClientContext context;
  rpc::PrepareContext(context, {.auth_token = kToken}, Deadline());
  v1::ReserveRequest request;
  request.set_request_id("r");
  request.set_n_prompt_tokens(16);
  for (int i = 0; i < 15; ++i) request.add_prompt_tokens(i);
  request.set_max_tokens(4);
  request.set_lease_ms(60000);
  request.set_model_fingerprint(before.model().fingerprint());
  v1::ReserveResponse response;
  const grpc::Status status =
      v1::DecodeWorker::NewStub(channel_)->Reserve(&context, request, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(status.error_message().find("15 prompt tokens given"), std::string::npos)
      << status.error_message();
  v1::StatusResponse after;
  ASSERT_TRUE(Status(kToken, &after).ok());
  EXPECT_EQ(after.load().kv_blocks_free(), before.load().kv_blocks_free());
}

TEST(PrefillWorkerServerTest, ADestinationClaimingMoreCachedBlocksThanThePromptIsRefused) {
  const std::string path = test_support::TempPath("prefill-worker-server.gguf");
  ASSERT_TRUE(engine::WriteSyntheticModel(path, {.seed = 5}).ok());
  WorkerOptions options;
  options.role = v1::WORKER_ROLE_PREFILL;
  options.model_path = path;
  options.n_threads = 1;
  options.kv_cache_bytes = 1 << 20;
  options.block_size = 16;
  absl::StatusOr<std::unique_ptr<WorkerServer>> server = WorkerServer::Start(options);
  ASSERT_TRUE(server.ok()) << server.status();
  absl::StatusOr<std::shared_ptr<grpc::Channel>> channel =
      rpc::MakeChannel((*server)->address(), {});
  ASSERT_TRUE(channel.ok());
  auto stub = v1::PrefillWorker::NewStub(*channel);
  v1::StatusResponse identity;
  {
    grpc::ClientContext context;
    ASSERT_TRUE(stub->Status(&context, {}, &identity).ok());
  }
  // 33 tokens: at most 2 blocks (32 tokens) may come from the decode worker's cache.
  for (int32_t cached_blocks : {-1, 3, 2}) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
    v1::PrefillRequest request;
    request.set_request_id("p");
    for (int i = 0; i < 33; ++i) request.add_prompt_tokens(i);
    request.set_model_fingerprint(identity.model().fingerprint());
    request.mutable_destination()->set_decode_address("127.0.0.1:1");
    request.mutable_destination()->set_reservation_id("r");
    request.mutable_destination()->set_n_cached_blocks(cached_blocks);
    v1::PrefillResponse response;
    const grpc::Status status = stub->Prefill(&context, request, &response);
    if (cached_blocks == 2) {
      // Valid: it fails later, at the unreachable destination.
      EXPECT_NE(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << status.error_message();
    } else {
      EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << cached_blocks;
      EXPECT_NE(status.error_message().find("n_cached_blocks"), std::string::npos);
    }
  }
  (*server)->Shutdown(std::chrono::milliseconds(100));
}

// grpc.health.v1.Health/Check, called generically: HealthCheckRequest{service: ""} (encoded as
// field 1, length 0), and the answer must be HealthCheckResponse{status: SERVING}, whose encoding
// is field 1 = 1.
TEST_F(WorkerServerTest, HealthNeedsNoToken) {
  grpc::GenericStub stub(channel_);
  grpc::CompletionQueue cq;
  grpc::ClientContext context;
  context.set_deadline(Deadline());
  grpc::Slice encoded(std::string("\x0a\x00", 2));
  grpc::ByteBuffer request(&encoded, 1);
  grpc::ByteBuffer response;
  grpc::Status status;
  std::unique_ptr<grpc::GenericClientAsyncResponseReader> call =
      stub.PrepareUnaryCall(&context, "/grpc.health.v1.Health/Check", request, &cq);
  call->StartCall();
  call->Finish(&response, &status, reinterpret_cast<void*>(1));
  void* tag = nullptr;
  bool ok = false;
  ASSERT_TRUE(cq.Next(&tag, &ok));
  ASSERT_TRUE(status.ok()) << status.error_message();
  std::vector<grpc::Slice> slices;
  ASSERT_TRUE(response.Dump(&slices).ok());
  std::string bytes;
  for (const grpc::Slice& slice : slices) {
    bytes.append(reinterpret_cast<const char*>(slice.begin()), slice.size());
  }
  EXPECT_EQ(bytes, std::string("\x08\x01", 2));
  cq.Shutdown();
  while (cq.Next(&tag, &ok)) {
  }
}

}  // namespace
}  // namespace baton::worker
