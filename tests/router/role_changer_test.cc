// The router's side of a role change: the last-worker rule, the registry following the worker's
// role (from the change and from heartbeats), and the call to the worker over gRPC on loopback
// (a WorkerControl service that records what it was asked).
#include "router/role_changer.h"

#include <memory>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "baton/v1/worker.grpc.pb.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rpc/server_options.h"
#include "rpc/status.h"
#include "tests/support/fake_clock.h"

namespace baton::router {
namespace {

using ::testing::HasSubstr;

constexpr char kFingerprint[] = "fp";

v1::ModelIdentity Model() {
  v1::ModelIdentity m;
  m.set_fingerprint(kFingerprint);
  m.set_block_size(16);
  return m;
}

// Answers ChangeRole with the role asked for, or with `refusal` when set.
class FakeWorkerControl final : public v1::WorkerControl::CallbackService {
 public:
  grpc::ServerUnaryReactor* ChangeRole(grpc::CallbackServerContext* context,
                                       const v1::ChangeRoleRequest* request,
                                       v1::ChangeRoleResponse* response) override {
    absl::MutexLock lock(&mu_);
    asked_.push_back(*request);
    if (!refusal_.ok()) return rpc::FinishUnary(context, rpc::ToGrpcStatus(refusal_));
    response->set_previous(role_);
    response->set_role(role_ = request->role());
    return rpc::FinishUnary(context, grpc::Status::OK);
  }
  void set_role(v1::WorkerRole role) {
    absl::MutexLock lock(&mu_);
    role_ = role;
  }
  void set_refusal(absl::Status refusal) {
    absl::MutexLock lock(&mu_);
    refusal_ = std::move(refusal);
  }
  std::vector<v1::ChangeRoleRequest> asked() {
    absl::MutexLock lock(&mu_);
    return asked_;
  }

 private:
  absl::Mutex mu_;
  v1::WorkerRole role_ ABSL_GUARDED_BY(mu_) = v1::WORKER_ROLE_UNSPECIFIED;
  absl::Status refusal_ ABSL_GUARDED_BY(mu_);
  std::vector<v1::ChangeRoleRequest> asked_ ABSL_GUARDED_BY(mu_);
};

class RoleChangerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<rpc::StartedServer> started = rpc::StartServer({}, {&control_});
    ASSERT_TRUE(started.ok()) << started.status();
    server_ = std::move(*started);
    address_ = "127.0.0.1:" + std::to_string(server_.port);
  }
  void TearDown() override { server_.server->Shutdown(); }

  // Registers a worker of `role` (at the fake's address when `reachable`), reported healthy.
  std::string Add(v1::WorkerRole role, bool reachable = false) {
    const std::string address = reachable ? address_ : "127.0.0.1:" + std::to_string(++port_);
    if (reachable) control_.set_role(role);
    absl::StatusOr<std::string> id = registry_.Register(role, address, Model(), {});
    EXPECT_TRUE(id.ok()) << id.status();
    return id.value_or("");
  }
  v1::WorkerRole RoleInRegistry(const std::string& id) {
    for (const WorkerSnapshot& w : registry_.Snapshot()) {
      if (w.id == id) return w.role;
    }
    return v1::WORKER_ROLE_UNSPECIFIED;
  }

  FakeWorkerControl control_;
  rpc::StartedServer server_;
  std::string address_;
  int port_ = 40000;
  test_support::FakeClock clock_;
  WorkerRegistry registry_{
      WorkerRegistryOptions{.model_fingerprint = kFingerprint, .clock = &clock_}};
  WorkerChannels channels_{rpc::ClientOptions{}};
  RoleChanger changer_{&registry_, &channels_};
};

TEST_F(RoleChangerTest, AsksTheWorkerAndPlacesByItsNewRole) {
  const std::string id = Add(v1::WORKER_ROLE_DECODE, /*reachable=*/true);
  Add(v1::WORKER_ROLE_DECODE);
  Add(v1::WORKER_ROLE_PREFILL);
  absl::StatusOr<v1::ChangeRoleResponse> changed =
      changer_.Change(id, v1::WORKER_ROLE_PREFILL, absl::Milliseconds(250));
  ASSERT_TRUE(changed.ok()) << changed.status();
  EXPECT_EQ(changed->previous(), v1::WORKER_ROLE_DECODE);
  EXPECT_EQ(changed->role(), v1::WORKER_ROLE_PREFILL);
  ASSERT_EQ(control_.asked().size(), 1u);
  EXPECT_EQ(control_.asked()[0].drain_timeout_ms(), 250);
  EXPECT_EQ(RoleInRegistry(id), v1::WORKER_ROLE_PREFILL);
  // Its heartbeats carry its role from then on; one without a role changes nothing.
  EXPECT_TRUE(registry_.Heartbeat(id, {}, v1::WORKER_ROLE_BOTH));
  EXPECT_EQ(RoleInRegistry(id), v1::WORKER_ROLE_BOTH);
  EXPECT_TRUE(registry_.Heartbeat(id, {}));
  EXPECT_EQ(RoleInRegistry(id), v1::WORKER_ROLE_BOTH);
}

TEST_F(RoleChangerTest, NeverTakesTheLastWorkerOfASide) {
  const std::string decode = Add(v1::WORKER_ROLE_DECODE, /*reachable=*/true);
  const std::string prefill = Add(v1::WORKER_ROLE_PREFILL);
  absl::StatusOr<v1::ChangeRoleResponse> refused =
      changer_.Change(decode, v1::WORKER_ROLE_PREFILL, absl::ZeroDuration());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(refused.status().message(), HasSubstr("last healthy worker serving decode"));
  EXPECT_TRUE(control_.asked().empty());  // the worker was never asked
  // To both keeps decode: allowed. Then the prefill worker may go to decode (both serves prefill).
  EXPECT_TRUE(changer_.Change(decode, v1::WORKER_ROLE_BOTH, absl::ZeroDuration()).ok());
  EXPECT_TRUE(
      CheckSidesKept(registry_.Snapshot(), prefill, v1::WORKER_ROLE_PREFILL, v1::WORKER_ROLE_DECODE)
          .ok());
  // An unhealthy worker does not count: with the prefill worker unseen, the colocated one is the
  // last serving prefill.
  clock_.Advance(absl::Seconds(10));
  registry_.Heartbeat(decode, {}, v1::WORKER_ROLE_BOTH);
  EXPECT_THAT(
      CheckSidesKept(registry_.Snapshot(), decode, v1::WORKER_ROLE_BOTH, v1::WORKER_ROLE_DECODE)
          .message(),
      HasSubstr("last healthy worker serving prefill"));
}

TEST_F(RoleChangerTest, RefusalsNameTheWorkerAndLeaveItsRole) {
  const std::string id = Add(v1::WORKER_ROLE_DECODE, /*reachable=*/true);
  Add(v1::WORKER_ROLE_BOTH);
  control_.set_refusal(absl::FailedPreconditionError("this worker still drains"));
  absl::StatusOr<v1::ChangeRoleResponse> refused =
      changer_.Change(id, v1::WORKER_ROLE_PREFILL, absl::ZeroDuration());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(refused.status().message(), HasSubstr(address_));
  EXPECT_THAT(refused.status().message(), HasSubstr("still drains"));
  EXPECT_EQ(RoleInRegistry(id), v1::WORKER_ROLE_DECODE);
  EXPECT_EQ(
      changer_.Change("nobody", v1::WORKER_ROLE_PREFILL, absl::ZeroDuration()).status().code(),
      absl::StatusCode::kNotFound);
  EXPECT_EQ(changer_.Change(id, v1::WORKER_ROLE_UNSPECIFIED, absl::ZeroDuration()).status().code(),
            absl::StatusCode::kInvalidArgument);
  // A static worker's role is its flag's.
  const std::string listed = registry_.AddStatic(v1::WORKER_ROLE_DECODE, "127.0.0.1:1");
  EXPECT_THAT(
      changer_.Change(listed, v1::WORKER_ROLE_BOTH, absl::ZeroDuration()).status().message(),
      HasSubstr("listed statically"));
  EXPECT_EQ(registry_.SetRole(listed, v1::WORKER_ROLE_BOTH).code(),
            absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace baton::router
