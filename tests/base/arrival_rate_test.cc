#include "base/arrival_rate.h"

#include "gtest/gtest.h"

namespace baton {
namespace {

const absl::Time kStart = absl::FromUnixSeconds(1000);

TEST(ArrivalRateTest, ASteadyRateReadsRightFromTheStartAndAChangeShowsWithinATimeConstant) {
  ArrivalRate rate(absl::Seconds(10), kStart);
  EXPECT_EQ(rate.PerSecond(kStart), 0);
  // 100 units every second: read as 100/s after 3 s already, and after a minute.
  absl::Time t = kStart;
  for (int s = 1; s <= 60; ++s) {
    t = kStart + absl::Seconds(s);
    rate.Add(100, t);
    if (s == 3 || s == 60) EXPECT_NEAR(rate.PerSecond(t), 100, 10) << s;
  }
  // Nothing more arrives: after one time constant the rate reads about e^-1 of it, after five
  // under 1%.
  EXPECT_NEAR(rate.PerSecond(t + absl::Seconds(10)), 100 / std::exp(1.0), 5);
  EXPECT_LT(rate.PerSecond(t + absl::Seconds(50)), 1);
  // Units must be positive.
  rate.Add(-5, t + absl::Seconds(50));
  EXPECT_GE(rate.PerSecond(t + absl::Seconds(50)), 0);
}

}  // namespace
}  // namespace baton
