#include "router/request_pool.h"

#include <algorithm>
#include <atomic>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace baton::router {
namespace {

TEST(RequestPoolTest, RunsTasksAndQueuesThemInOrderWhenEveryThreadIsBusy) {
  RequestPool pool(/*max_threads=*/2);
  EXPECT_FALSE(pool.Saturated());
  absl::Notification release;
  std::atomic<int> started{0};
  for (int i = 0; i < 2; ++i) {
    ASSERT_TRUE(pool.Submit([&] {
      started.fetch_add(1);
      release.WaitForNotification();
    }));
  }
  while (started.load() < 2) absl::SleepFor(absl::Milliseconds(1));
  EXPECT_TRUE(pool.Saturated());
  absl::Mutex mu;
  std::vector<int> order;
  for (int i = 0; i < 5; ++i) {
    ASSERT_TRUE(pool.Submit([&, i] {
      absl::MutexLock lock(&mu);
      order.push_back(i);
    }));
  }
  release.Notify();
  pool.Stop();  // runs what was submitted, then joins
  // Two threads take the queue from its front: the order may interleave, but every task ran.
  std::sort(order.begin(), order.end());
  EXPECT_THAT(order, ::testing::ElementsAre(0, 1, 2, 3, 4));
  EXPECT_FALSE(pool.Submit([] {}));
}

TEST(RequestPoolTest, OneThreadRunsTasksFifo) {
  RequestPool pool(1);
  absl::Notification release;
  ASSERT_TRUE(pool.Submit([&] { release.WaitForNotification(); }));
  std::vector<int> order;  // only the pool thread writes it
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(pool.Submit([&, i] { order.push_back(i); }));
  release.Notify();
  pool.Stop();
  EXPECT_THAT(order, ::testing::ElementsAre(0, 1, 2, 3));
}

}  // namespace
}  // namespace baton::router
