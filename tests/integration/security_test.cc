// Shared token and TLS across the whole cluster, with real processes.
#include <cstdlib>
#include <filesystem>
#include <memory>

#include "gtest/gtest.h"
#include "rpc/sampling_params_proto.h"
#include "tests/integration/local_cluster.h"
#include "tests/support/test_certificate.h"
#include "tests/support/temp_path.h"

namespace baton {
namespace {

using test_support::LocalCluster;

baton::v1::GenerateRequest Hello() {
  baton::v1::GenerateRequest request;
  request.set_prompt("Hello");
  request.mutable_sampling()->set_max_tokens(3);
  return request;
}

TEST(SecurityTest, SharedTokenIsRequiredEverywhere) {
  LocalCluster cluster({"--token", "s3cret"}, {.auth_token = "s3cret"});
  ASSERT_TRUE(cluster.StartRouter().ok());
  absl::StatusOr<test_support::Proc*> worker = cluster.StartWorker("both");
  ASSERT_TRUE(worker.ok());
  ASSERT_TRUE(cluster.WaitHealthy(1).ok());
  {
    auto stub = cluster.RouterStub();
    grpc::ClientContext context;
    cluster.Prepare(context);
    test_support::GenerateOutcome outcome = test_support::RunGenerate(*stub, context, Hello());
    EXPECT_TRUE(outcome.status.ok());
    EXPECT_EQ(outcome.last.timings().kv_transport(), "in_process");  // a colocated worker
  }
  // Same addresses, wrong token: the router and the worker both refuse.
  absl::StatusOr<std::shared_ptr<grpc::Channel>> channel =
      rpc::MakeChannel(cluster.router_address(), {.auth_token = "wrong"});
  ASSERT_TRUE(channel.ok()) << channel.status();
  auto stub = baton::v1::Router::NewStub(*channel);
  grpc::ClientContext context;
  rpc::PrepareContext(context, {.auth_token = "wrong"},
                      std::chrono::system_clock::now() + std::chrono::seconds(10));
  EXPECT_EQ(test_support::RunGenerate(*stub, context, Hello()).status.error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  absl::StatusOr<std::shared_ptr<grpc::Channel>> worker_channel =
      rpc::MakeChannel((*worker)->address, {});
  ASSERT_TRUE(worker_channel.ok()) << worker_channel.status();
  auto worker_stub = baton::v1::DecodeWorker::NewStub(*worker_channel);
  grpc::ClientContext wc;
  rpc::PrepareContext(wc, {}, std::chrono::system_clock::now() + std::chrono::seconds(10));
  baton::v1::StatusResponse response;
  EXPECT_EQ(worker_stub->Status(&wc, {}, &response).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
}

TEST(SecurityTest, TlsBetweenEveryComponent) {
  const std::string dir = test_support::TempPath("tls");
  std::filesystem::create_directories(dir);
  absl::StatusOr<test_support::TestCertificate> made = test_support::MakeTestCertificate(dir + "/");
  ASSERT_TRUE(made.ok()) << made.status();
  const std::string& cert = made->cert;
  const std::string& key = made->key;
  rpc::ClientOptions client;
  client.tls.ca_file = cert;
  LocalCluster cluster({"--tls-cert", cert, "--tls-key", key, "--tls-ca", cert}, client);
  ASSERT_TRUE(cluster.StartRouter().ok());
  ASSERT_TRUE(cluster.StartWorker("prefill").ok());
  ASSERT_TRUE(cluster.StartWorker("decode").ok());
  ASSERT_TRUE(cluster.WaitHealthy(2).ok());
  auto stub = cluster.RouterStub();
  grpc::ClientContext context;
  cluster.Prepare(context);
  test_support::GenerateOutcome outcome = test_support::RunGenerate(*stub, context, Hello());
  EXPECT_TRUE(outcome.status.ok()) << outcome.status.error_message();
  EXPECT_GT(outcome.last.timings().kv_bytes(), 0);  // the KV crossed a TLS channel
  EXPECT_EQ(outcome.last.timings().kv_transport(), "grpc");
  // A plaintext client cannot talk to it.
  absl::StatusOr<std::shared_ptr<grpc::Channel>> plain_channel =
      rpc::MakeChannel(cluster.router_address(), {});
  ASSERT_TRUE(plain_channel.ok()) << plain_channel.status();
  auto plain = baton::v1::Router::NewStub(*plain_channel);
  grpc::ClientContext pc;
  rpc::PrepareContext(pc, {}, std::chrono::system_clock::now() + std::chrono::seconds(5));
  EXPECT_FALSE(test_support::RunGenerate(*plain, pc, Hello()).status.ok());
}

}  // namespace
}  // namespace baton
