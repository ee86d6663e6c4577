#include "worker/role_switch.h"

#include <atomic>
#include <chrono>
#include <string>
#include <thread>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "metrics/metrics.h"

namespace baton::worker {
namespace {

using ::testing::HasSubstr;

// What a worker's sides hold, as the test sets it; and what the switch asked of them.
struct FakeSides {
  std::atomic<int64_t> prefill{0};
  std::atomic<int64_t> decode{0};
  std::atomic<int> ended{0};  // end_decode calls
  absl::Mutex mu;
  absl::Status last_end ABSL_GUARDED_BY(mu);

  RoleSwitchParts Parts() {
    return {.prefill_held = [this] { return prefill.load(); },
            .decode_held = [this] { return decode.load(); },
            .end_decode =
                [this](const absl::Status& why) {
                  absl::MutexLock lock(&mu);
                  last_end = why;
                  ++ended;
                  decode = 0;  // the batch ends every sequence
                },
            .address = [] { return std::string("127.0.0.1:1"); }};
  }
};

// Polls `done` for up to 10 s.
template <typename F>
bool Eventually(F done) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!done()) {
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

double RoleGauge(const std::string& role) {
  return metrics::Registry::Global().GetGauge("baton:worker_role", "", {{"role", role}}).value();
}

TEST(RoleSwitchTest, SwitchesAtOnceAndDrainsTheDroppedPrefillSideItsOwnTime) {
  FakeSides sides;
  sides.prefill = 300;  // queued prompt tokens
  RoleSwitch role_switch(v1::WORKER_ROLE_PREFILL, sides.Parts());
  EXPECT_EQ(RoleGauge("prefill"), 1);
  absl::StatusOr<RoleChange> change =
      role_switch.Change(v1::WORKER_ROLE_DECODE, std::chrono::milliseconds(50));
  ASSERT_TRUE(change.ok()) << change.status();
  EXPECT_EQ(change->previous, v1::WORKER_ROLE_PREFILL);
  EXPECT_EQ(change->role, v1::WORKER_ROLE_DECODE);
  EXPECT_EQ(role_switch.role(), v1::WORKER_ROLE_DECODE);
  EXPECT_EQ(RoleGauge("decode"), 1);
  EXPECT_EQ(RoleGauge("prefill"), 0);
  // Queued prompts are finished, not cut, whatever the bound: still draining past it.
  std::this_thread::sleep_for(std::chrono::milliseconds(150));
  EXPECT_TRUE(role_switch.draining());
  EXPECT_EQ(sides.ended.load(), 0);
  const absl::StatusOr<RoleChange> second =
      role_switch.Change(v1::WORKER_ROLE_BOTH, std::chrono::milliseconds(0));
  EXPECT_EQ(second.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(second.status().message(), HasSubstr("still drains"));
  sides.prefill = 0;
  EXPECT_TRUE(Eventually([&] { return !role_switch.draining(); }));
  EXPECT_TRUE(role_switch.Change(v1::WORKER_ROLE_BOTH, std::chrono::milliseconds(0)).ok());
}

TEST(RoleSwitchTest, DecodeSequencesPastTheBoundEndWithAbortedToMigrate) {
  FakeSides sides;
  sides.decode = 4;
  RoleSwitch role_switch(v1::WORKER_ROLE_DECODE, sides.Parts());
  const auto start = std::chrono::steady_clock::now();
  ASSERT_TRUE(role_switch.Change(v1::WORKER_ROLE_PREFILL, std::chrono::milliseconds(100)).ok());
  EXPECT_TRUE(Eventually([&] { return !role_switch.draining(); }));
  EXPECT_GE(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(100));
  EXPECT_GE(sides.ended.load(), 1);
  absl::MutexLock lock(&sides.mu);
  EXPECT_EQ(sides.last_end.code(), absl::StatusCode::kAborted);
  EXPECT_THAT(sides.last_end.message(), HasSubstr("left the decode role"));
}

TEST(RoleSwitchTest, SequencesThatFinishWithinTheBoundAreNotEnded) {
  FakeSides sides;
  sides.decode = 2;
  RoleSwitch role_switch(v1::WORKER_ROLE_BOTH, sides.Parts());
  ASSERT_TRUE(role_switch.Change(v1::WORKER_ROLE_PREFILL, std::chrono::milliseconds(5000)).ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_TRUE(role_switch.draining());
  sides.decode = 0;  // they finished
  EXPECT_TRUE(Eventually([&] { return !role_switch.draining(); }));
  EXPECT_EQ(sides.ended.load(), 0);
}

TEST(RoleSwitchTest, KeepingASideDrainsNothingAndTheSameRoleChangesNothing) {
  FakeSides sides;
  sides.decode = 3;
  RoleSwitch role_switch(v1::WORKER_ROLE_DECODE, sides.Parts());
  // Decode to both drops no side: nothing waits, nothing ends.
  ASSERT_TRUE(role_switch.Change(v1::WORKER_ROLE_BOTH, std::chrono::milliseconds(1)).ok());
  EXPECT_TRUE(Eventually([&] { return !role_switch.draining(); }));
  EXPECT_EQ(sides.ended.load(), 0);
  const double changes =
      metrics::Registry::Global()
          .GetCounter("baton:role_changes_total", "", {{"from", "both"}, {"to", "both"}})
          .value();
  absl::StatusOr<RoleChange> same =
      role_switch.Change(v1::WORKER_ROLE_BOTH, std::chrono::milliseconds(1));
  ASSERT_TRUE(same.ok());
  EXPECT_EQ(same->previous, v1::WORKER_ROLE_BOTH);
  EXPECT_FALSE(role_switch.draining());
  EXPECT_EQ(metrics::Registry::Global()
                .GetCounter("baton:role_changes_total", "", {{"from", "both"}, {"to", "both"}})
                .value(),
            changes);
  EXPECT_EQ(
      role_switch.Change(v1::WORKER_ROLE_UNSPECIFIED, std::chrono::milliseconds(1)).status().code(),
      absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace baton::worker
