// Workers that change role in place (worker/role_switch.h, router/role_changer.h), with real
// processes on loopback: a decode worker told to become a prefill worker mid-stream hands its
// sequence on (the stream continues on another pair with the uninterrupted run's tokens), serves
// prefill from then on, refuses new reservations, and holds no block; the last decode worker is
// never taken; and the SLO planner (--planner slo) makes a move by itself, once, on a steady load.
#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/integration/local_cluster.h"

namespace baton {
namespace {

using test_support::GenerateOutcome;
using test_support::LocalCluster;
using test_support::Proc;
using ::testing::HasSubstr;

v1::GenerateRequest SampledRequest() { return test_support::SampledStoryRequest(99); }

GenerateOutcome Generate(const LocalCluster& local, const v1::GenerateRequest& request) {
  auto stub = local.RouterStub();
  grpc::ClientContext context;
  local.Prepare(context, std::chrono::seconds(120));
  return test_support::RunGenerate(*stub, context, request);
}

v1::ClusterStatusResponse Status(const LocalCluster& local) {
  auto stub = local.RouterStub();
  grpc::ClientContext context;
  local.Prepare(context, std::chrono::seconds(10));
  v1::ClusterStatusResponse status;
  EXPECT_TRUE(stub->ClusterStatus(&context, {}, &status).ok());
  return status;
}

// The router's view of the worker at `address`.
v1::WorkerStatus WorkerAt(const LocalCluster& local, const std::string& address) {
  const v1::ClusterStatusResponse status = Status(local);
  for (const v1::WorkerStatus& w : status.workers()) {
    if (w.address() == address) return w;
  }
  return {};
}

grpc::Status ChangeRole(const LocalCluster& local, const std::string& worker_id,
                        v1::WorkerRole role, int64_t drain_timeout_ms,
                        v1::ChangeWorkerRoleResponse* response) {
  auto stub = local.RouterStub();
  grpc::ClientContext context;
  local.Prepare(context, std::chrono::seconds(10));
  v1::ChangeWorkerRoleRequest request;
  request.set_worker_id(worker_id);
  request.set_role(role);
  request.set_drain_timeout_ms(drain_timeout_ms);
  return stub->ChangeWorkerRole(&context, request, response);
}

TEST(RoleChangeTest, ADecodeWorkerBecomesPrefillMidStreamAndTheStreamGoesOnUnchanged) {
  LocalCluster local({}, {});
  ASSERT_TRUE(local.StartRouter().ok());
  absl::StatusOr<Proc*> p = local.StartWorker("prefill");
  absl::StatusOr<Proc*> d0 = local.StartWorker("decode");
  absl::StatusOr<Proc*> d1 = local.StartWorker("decode");
  ASSERT_TRUE(p.ok() && d0.ok() && d1.ok());
  ASSERT_TRUE(local.WaitHealthy(3).ok());
  const v1::GenerateRequest request = SampledRequest();
  const GenerateOutcome reference = Generate(local, request);
  ASSERT_TRUE(reference.status.ok()) << reference.status.error_message();
  ASSERT_EQ(reference.tokens.size(), 120u);

  // Stream it again; once tokens flow, the decode worker serving it becomes a prefill worker
  // with a 1 ms bound: its sequence ends at once and moves.
  auto stub = local.RouterStub();
  grpc::ClientContext context;
  local.Prepare(context, std::chrono::seconds(120));
  std::unique_ptr<grpc::ClientReader<v1::GenerateResponse>> reader =
      stub->Generate(&context, request);
  GenerateOutcome moved;
  v1::GenerateResponse message;
  std::string changed;  // the address of the worker that changed role
  while (reader->Read(&message)) {
    moved.text += message.text();
    moved.tokens.insert(moved.tokens.end(), message.tokens().begin(), message.tokens().end());
    moved.last = message;
    if (!changed.empty() || moved.tokens.size() < 4) continue;
    for (Proc* worker : {*d0, *d1}) {
      absl::StatusOr<v1::WorkerLoad> load = local.DecodeLoad(worker->address);
      if (!load.ok() || load->running_sequences() == 0) continue;
      changed = worker->address;
      v1::ChangeWorkerRoleResponse response;
      const grpc::Status status = ChangeRole(local, WorkerAt(local, changed).worker_id(),
                                             v1::WORKER_ROLE_PREFILL, 1, &response);
      ASSERT_TRUE(status.ok()) << status.error_message();
      EXPECT_EQ(response.previous(), v1::WORKER_ROLE_DECODE);
      EXPECT_EQ(response.role(), v1::WORKER_ROLE_PREFILL);
    }
  }
  moved.status = reader->Finish();
  ASSERT_FALSE(changed.empty()) << "no decode worker was running the request";
  ASSERT_TRUE(moved.status.ok()) << moved.status.error_message();
  EXPECT_EQ(moved.tokens, reference.tokens);
  EXPECT_EQ(moved.text, reference.text);
  EXPECT_EQ(moved.last.timings().migrations(), 1);
  EXPECT_NE(moved.last.timings().decode_worker(), changed);

  // The router places by the new role; the worker says so itself and refuses reservations.
  EXPECT_EQ(WorkerAt(local, changed).role(), v1::WORKER_ROLE_PREFILL);
  {
    grpc::ClientContext status_context;
    local.Prepare(status_context, std::chrono::seconds(10));
    v1::StatusResponse status;
    ASSERT_TRUE(local.PrefillStub(changed)->Status(&status_context, {}, &status).ok());
    EXPECT_EQ(status.role(), v1::WORKER_ROLE_PREFILL);
    grpc::ClientContext reserve_context;
    local.Prepare(reserve_context, std::chrono::seconds(10));
    v1::ReserveRequest reserve;
    reserve.set_request_id("late");
    reserve.set_n_prompt_tokens(4);
    reserve.set_max_tokens(4);
    v1::ReserveResponse reserved;
    const grpc::Status refused =
        local.DecodeStub(changed)->Reserve(&reserve_context, reserve, &reserved);
    EXPECT_EQ(refused.error_code(), grpc::StatusCode::ABORTED);
    EXPECT_THAT(refused.error_message(), HasSubstr("its role is prefill now"));
  }
  // Nothing held anywhere: the ended sequence's blocks came back.
  EXPECT_EQ(local.WaitEveryWorkerFree(), absl::OkStatus());

  // The other decode worker is the last one serving decode: it stays.
  const std::string last = changed == (*d0)->address ? (*d1)->address : (*d0)->address;
  v1::ChangeWorkerRoleResponse response;
  const grpc::Status refused =
      ChangeRole(local, WorkerAt(local, last).worker_id(), v1::WORKER_ROLE_PREFILL, 0, &response);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(refused.error_message(), HasSubstr("last healthy worker serving decode"));
  EXPECT_EQ(WorkerAt(local, last).role(), v1::WORKER_ROLE_DECODE);

  // With two prefill workers and one decode worker now, the request gives the same output.
  const GenerateOutcome after = Generate(local, request);
  ASSERT_TRUE(after.status.ok()) << after.status.error_message();
  EXPECT_EQ(after.tokens, reference.tokens);
  EXPECT_EQ(after.last.timings().decode_worker(), last);
  EXPECT_EQ(local.WaitEveryWorkerFree(), absl::OkStatus());
  // Every prompt computed: once the workers have reported, the router reads no queue anywhere
  // (its own placements count toward a queue only until their passes end).
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  int64_t queued = -1;
  while (queued != 0 && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    queued = 0;
    const v1::ClusterStatusResponse status = Status(local);
    for (const v1::WorkerStatus& w : status.workers()) queued += w.load().queued_prompt_tokens();
  }
  EXPECT_EQ(queued, 0);
}

TEST(RoleChangeTest, ThePlannerGivesTheMissingSideAWorkerOnceOnASteadyLoad) {
  // Long prompts, each its own (no prefix to share), sent without pause against a TTFT target no
  // prefill meets: prefill is the side about to miss. The decode worker becomes both (its prefill
  // rate added to the side's, its few short answers, stalled behind prompt passes, still far
  // within the TPOT target; the prefill worker cannot go: decode would have none), and no further
  // move helps (the other worker to both adds no prefill rate), so none follows while the load
  // holds.
  LocalCluster local({}, {});
  // The planner's first look is one dwell (3 s) after the router starts: both workers are
  // registered by then.
  ASSERT_TRUE(local
                  .StartRouter({"--planner", "slo", "--slo-ttft-ms", "1", "--slo-tpot-ms", "60000",
                                "--planner-interval-ms", "200", "--planner-dwell-s", "3"})
                  .ok());
  absl::StatusOr<Proc*> p = local.StartWorker("prefill");
  absl::StatusOr<Proc*> d = local.StartWorker("decode");
  ASSERT_TRUE(p.ok() && d.ok());
  ASSERT_TRUE(local.WaitHealthy(2).ok());
  std::string long_text;
  for (int i = 0; i < 60; ++i) long_text += "the keeper climbs the stairs to light the lamp. ";
  std::atomic<bool> stop{false};
  std::atomic<int> served{0};
  std::atomic<int> failed{0};
  std::vector<std::thread> senders;
  for (int s = 0; s < 3; ++s) {
    senders.emplace_back([&, s] {
      for (int i = 0; !stop.load(); ++i) {
        v1::GenerateRequest request = SampledRequest();
        request.set_prompt("Sender " + std::to_string(s) + ", prompt " + std::to_string(i) + ": " +
                           long_text);
        request.mutable_sampling()->set_max_tokens(4);
        const GenerateOutcome outcome = Generate(local, request);
        (outcome.status.ok() && outcome.tokens.size() == 4u ? served : failed)++;
      }
    });
  }
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (WorkerAt(local, (*d)->address).role() != v1::WORKER_ROLE_BOTH &&
         std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_EQ(WorkerAt(local, (*d)->address).role(), v1::WORKER_ROLE_BOTH);
  // Over the next 4 s (20 planner rounds, past the dwell) of the same load nothing moves again.
  const int served_before = served.load();
  std::this_thread::sleep_for(std::chrono::seconds(4));
  EXPECT_GT(served.load(), served_before) << "the load stopped";
  const v1::WorkerStatus prefill = WorkerAt(local, (*p)->address);
  EXPECT_EQ(prefill.role(), v1::WORKER_ROLE_PREFILL);
  EXPECT_EQ(WorkerAt(local, (*d)->address).role(), v1::WORKER_ROLE_BOTH);
  // The demand the planner read: the prompts arriving at the prefill worker, each of several
  // hundred tokens.
  EXPECT_GT(prefill.load().prompt_tokens_arriving_per_second(), 0);
  EXPECT_GT(prefill.load().prompt_tokens_per_prompt(), 300);
  stop = true;
  for (std::thread& sender : senders) sender.join();
  EXPECT_EQ(failed.load(), 0);
  EXPECT_EQ(local.WaitEveryWorkerFree(), absl::OkStatus());
}

}  // namespace
}  // namespace baton
