// ThreadPool: every task index is covered exactly once, by the ranges of the static split, each
// call on a thread index no concurrent call has, for many task and thread counts, repeatedly (a
// lost wake-up would hang the test), with and without spinning.
#include "kernels/cpu/thread_pool.h"

#include <atomic>
#include <cstdint>
#include <vector>

#include "gtest/gtest.h"

namespace baton::kernels {
namespace {

void ExpectEachIndexOnce(ThreadPool& pool, int64_t n_tasks) {
  std::vector<std::atomic<int>> hits(static_cast<size_t>(n_tasks));
  std::vector<std::atomic<int>> running(static_cast<size_t>(pool.n_threads()));
  std::atomic<int> calls{0};
  std::atomic<bool> bad_range{false};
  std::atomic<bool> shared_thread{false};
  // One thread runs the whole job as one call.
  const int64_t ranges =
      pool.n_threads() == 1
          ? std::min<int64_t>(n_tasks, 1)
          : std::min<int64_t>(n_tasks, ThreadPool::kRangesPerThread * pool.n_threads());
  pool.ParallelFor(n_tasks, [&](int64_t begin, int64_t end, int thread) {
    calls.fetch_add(1);
    if (thread < 0 || thread >= pool.n_threads()) {
      bad_range = true;
      return;
    }
    if (running[thread].fetch_add(1) != 0) shared_thread = true;
    // [begin, end) must be range r of the static split, the one that starts at begin.
    const int64_t r = (begin * ranges + n_tasks - 1) / n_tasks;
    if (begin >= end || begin != n_tasks * r / ranges || end != n_tasks * (r + 1) / ranges) {
      bad_range = true;
    }
    for (int64_t i = begin; i < end; ++i) hits[i].fetch_add(1, std::memory_order_relaxed);
    running[thread].fetch_sub(1);
  });
  EXPECT_FALSE(bad_range) << n_tasks << " tasks on " << pool.n_threads() << " threads";
  EXPECT_FALSE(shared_thread) << "two concurrent calls were given one thread index";
  EXPECT_EQ(calls.load(), ranges);
  for (int64_t i = 0; i < n_tasks; ++i) {
    ASSERT_EQ(hits[i].load(), 1) << "index " << i << " of " << n_tasks << " on "
                                 << pool.n_threads() << " threads";
  }
}

TEST(ThreadPoolTest, CoversEveryIndexExactlyOnce) {
  for (int threads : {1, 2, 3, 4, 7}) {
    ThreadPool pool({.n_threads = threads});
    EXPECT_EQ(pool.n_threads(), threads);
    for (int repeat = 0; repeat < 50; ++repeat) {
      for (int64_t n : {0, 1, 2, 3, 5, 8, 13, 64, 100, 1000, 4097}) ExpectEachIndexOnce(pool, n);
    }
  }
}

TEST(ThreadPoolTest, ManyQuickJobsWithoutSpinning) {
  // spin_microseconds 0: every hand-off goes through the futex wait, the path most prone to lost
  // wake-ups.
  for (int threads : {2, 3, 5}) {
    ThreadPool pool({.n_threads = threads, .spin_microseconds = 0});
    for (int repeat = 0; repeat < 2000; ++repeat) ExpectEachIndexOnce(pool, 1 + repeat % 17);
  }
}

TEST(ThreadPoolTest, ResultsVisibleToCallerAfterReturn) {
  ThreadPool pool({.n_threads = 4});
  std::vector<int64_t> out(10000);
  for (int repeat = 0; repeat < 100; ++repeat) {
    pool.ParallelFor(static_cast<int64_t>(out.size()), [&](int64_t begin, int64_t end, int) {
      for (int64_t i = begin; i < end; ++i) out[i] = i * repeat;
    });
    for (size_t i = 0; i < out.size(); ++i) ASSERT_EQ(out[i], static_cast<int64_t>(i) * repeat);
  }
}

TEST(ThreadPoolTest, DefaultUsesAffinityMask) {
  ThreadPool pool;
  EXPECT_EQ(pool.n_threads(), static_cast<int>(ThreadPool::AffinityCpus().size()));
  ExpectEachIndexOnce(pool, 123);
}

TEST(ThreadPoolTest, PinnedThreadsWork) {
  ThreadPool pool({.n_threads = 3, .pin_threads = true});
  for (int repeat = 0; repeat < 20; ++repeat) ExpectEachIndexOnce(pool, 77);
}

TEST(ThreadPoolTest, CreateAndDestroyRepeatedly) {
  for (int i = 0; i < 50; ++i) {
    ThreadPool pool({.n_threads = 3, .spin_microseconds = i % 2 == 0 ? 0 : 5});
    if (i % 3 != 0) ExpectEachIndexOnce(pool, 9);
  }
}

TEST(ThreadPoolDeathTest, NestedParallelForIsAnError) {
  EXPECT_DEATH(
      {
        ThreadPool pool({.n_threads = 2});
        pool.ParallelFor(2, [&](int64_t, int64_t, int) { pool.ParallelFor(2, [](int64_t, int64_t, int) {}); });
      },
      "ParallelFor");
}

}  // namespace
}  // namespace baton::kernels
