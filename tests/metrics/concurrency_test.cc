// metrics under contention: many threads updating the same series (and creating series, and
// rendering) at once; totals are exact.
#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "metrics/metrics.h"

namespace baton::metrics {
namespace {

constexpr int kThreads = 8;
constexpr int kPerThread = 20000;

void RunThreads(const std::function<void(int)>& body) {
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) threads.emplace_back(body, t);
  for (std::thread& t : threads) t.join();
}

TEST(ConcurrencyTest, CounterGaugeAndHistogramTotalsAreExact) {
  Registry r;
  Counter& counter = r.GetCounter("c_total", "C.");
  Gauge& gauge = r.GetGauge("g", "G.");
  Histogram& histogram = r.GetHistogram("h", "H.", {1, 2, 3});
  RunThreads([&](int t) {
    for (int i = 0; i < kPerThread; ++i) {
      counter.Increment();
      counter.Increment(0.5);
      gauge.Add(1);
      gauge.Add(-1);
      gauge.Add(2);
      histogram.Observe(static_cast<double>((t + i) % 4));  // 0, 1, 2, 3 in turn: exact sums
    }
  });
  const double n = static_cast<double>(kThreads) * kPerThread;
  EXPECT_EQ(counter.value(), 1.5 * n);
  EXPECT_EQ(gauge.value(), 2 * n);
  EXPECT_EQ(histogram.count(), static_cast<uint64_t>(n));
  EXPECT_EQ(histogram.sum(), 1.5 * n);  // each value 0..3 a quarter of the time
  const std::vector<uint64_t> counts = histogram.cumulative_counts();
  EXPECT_EQ(counts[0], static_cast<uint64_t>(n / 2));  // 0 and 1
  EXPECT_EQ(counts[1], static_cast<uint64_t>(3 * n / 4));
  EXPECT_EQ(counts[2], static_cast<uint64_t>(n));
  EXPECT_EQ(counts[3], static_cast<uint64_t>(n));
}

TEST(ConcurrencyTest, SeriesCreatedConcurrentlyAreSharedAndRenderingIsSafe) {
  Registry r;
  std::atomic<bool> stop{false};
  std::thread renderer([&] {
    while (!stop.load()) {
      const std::string text = r.RenderText();
      ASSERT_TRUE(text.empty() || text.back() == '\n');
    }
  });
  r.AddCollector([&r] { r.GetGauge("collected", "C.").Add(1); });
  RunThreads([&](int t) {
    for (int i = 0; i < kPerThread / 10; ++i) {
      // Looked up every time, on purpose: creation and look-up race with the other threads.
      r.GetCounter("by_label_total", "B.", {{"k", std::to_string(i % 10)}}).Increment();
      r.GetHistogram("lat", "L.", {0.5}, {{"t", std::to_string(t % 2)}}).Observe(1);
    }
  });
  stop.store(true);
  renderer.join();
  double total = 0;
  for (int k = 0; k < 10; ++k) {
    total += r.GetCounter("by_label_total", "B.", {{"k", std::to_string(k)}}).value();
  }
  EXPECT_EQ(total, static_cast<double>(kThreads) * (kPerThread / 10));
  const uint64_t observed = r.GetHistogram("lat", "L.", {0.5}, {{"t", "0"}}).count() +
                            r.GetHistogram("lat", "L.", {0.5}, {{"t", "1"}}).count();
  EXPECT_EQ(observed, static_cast<uint64_t>(kThreads) * (kPerThread / 10));
  const std::string text = r.RenderText();
  EXPECT_THAT(text, testing::HasSubstr("lat_bucket{t=\"0\",le=\"+Inf\"} "));
  EXPECT_THAT(text, testing::HasSubstr("by_label_total{k=\"9\"} "));
}

TEST(ConcurrencyTest, RemoveCollectorWaitsForARenderInProgress) {
  Registry r;
  std::atomic<bool> in_collector{false};
  std::atomic<bool> collector_done{false};
  auto state = std::make_unique<int>(0);
  const Registry::CollectorId id = r.AddCollector([&] {
    in_collector.store(true);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    ++*state;  // would be a use after free if RemoveCollector did not wait
    collector_done.store(true);
  });
  std::thread renderer([&] { r.RenderText(); });
  while (!in_collector.load()) std::this_thread::yield();
  r.RemoveCollector(id);
  EXPECT_TRUE(collector_done.load());
  state.reset();
  renderer.join();
}

}  // namespace
}  // namespace baton::metrics
