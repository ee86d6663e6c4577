// The statistics of `baton bench serve` against vLLM's benchmark_serving definitions and numpy.
#include "bench/latency_stats.h"

#include <cmath>
#include <vector>

#include "gtest/gtest.h"

namespace baton::bench {
namespace {

using std::chrono::milliseconds;

RequestOutcome Ok(double ttft_s, double e2e_s, int32_t output_tokens, int32_t prompt_tokens = 10,
                  std::vector<double> itl = {}) {
  RequestOutcome r;
  r.ok = true;
  r.ttft_s = ttft_s;
  r.e2e_s = e2e_s;
  r.output_tokens = output_tokens;
  r.prompt_tokens = prompt_tokens;
  r.itl_s = std::move(itl);
  return r;
}

RequestOutcome Failed(const std::string& code) {
  RequestOutcome r;
  r.error = code;
  r.error_message = "why";
  return r;
}

// numpy.percentile([5, 1, 9, 3, 7, 2, 8], p) (linear): rank p/100 * 6 into [1 2 3 5 7 8 9].
TEST(PercentileTest, MatchesNumpyLinearInterpolation) {
  const std::vector<double> sorted = {1, 2, 3, 5, 7, 8, 9};
  EXPECT_DOUBLE_EQ(PercentileOfSorted(sorted, 0), 1.0);
  EXPECT_DOUBLE_EQ(PercentileOfSorted(sorted, 25), 2.5);
  EXPECT_DOUBLE_EQ(PercentileOfSorted(sorted, 50), 5.0);
  EXPECT_NEAR(PercentileOfSorted(sorted, 90), 8.4, 1e-12);
  EXPECT_NEAR(PercentileOfSorted(sorted, 99), 8.94, 1e-12);
  EXPECT_DOUBLE_EQ(PercentileOfSorted(sorted, 100), 9.0);
}

TEST(PercentileTest, TwoValuesAndOneValue) {
  const std::vector<double> two = {0.1, 0.2};
  EXPECT_NEAR(PercentileOfSorted(two, 50), 0.15, 1e-12);
  EXPECT_NEAR(PercentileOfSorted(two, 90), 0.19, 1e-12);
  EXPECT_NEAR(PercentileOfSorted(two, 99), 0.199, 1e-12);
  const std::vector<double> one = {42};
  EXPECT_DOUBLE_EQ(PercentileOfSorted(one, 0), 42);
  EXPECT_DOUBLE_EQ(PercentileOfSorted(one, 99), 42);
}

TEST(SummarizeTest, SortsAndMatchesNumpy) {
  const LatencySummary s = Summarize({5, 1, 9, 3, 7, 2, 8});
  EXPECT_EQ(s.count, 7);
  EXPECT_DOUBLE_EQ(s.mean, 5.0);
  EXPECT_NEAR(s.stdev, std::sqrt(58.0 / 7.0), 1e-12);  // numpy.std: population
  EXPECT_DOUBLE_EQ(s.median, 5.0);
  EXPECT_NEAR(s.p90, 8.4, 1e-12);
  EXPECT_NEAR(s.p99, 8.94, 1e-12);
  EXPECT_DOUBLE_EQ(s.min, 1.0);
  EXPECT_DOUBLE_EQ(s.max, 9.0);
}

TEST(SummarizeTest, EmptyIsAllZero) {
  const LatencySummary s = Summarize({});
  EXPECT_EQ(s.count, 0);
  EXPECT_EQ(s.mean, 0);
  EXPECT_EQ(s.p99, 0);
}

TEST(TpotTest, IsDecodeTimeOverTokensAfterTheFirst) {
  // 0.2 s to the first token, 4 more tokens in the remaining 0.8 s.
  EXPECT_NEAR(*Tpot(Ok(0.2, 1.0, 5)), 0.2, 1e-12);
  EXPECT_NEAR(*Tpot(Ok(0.5, 0.6, 2)), 0.1, 1e-12);
}

TEST(TpotTest, UndefinedForOneTokenOrAFailure) {
  EXPECT_FALSE(Tpot(Ok(0.2, 0.2, 1)).has_value());
  EXPECT_FALSE(Tpot(Ok(0.2, 0.2, 0)).has_value());
  RequestOutcome failed = Ok(0.2, 1.0, 5);
  failed.ok = false;
  EXPECT_FALSE(Tpot(failed).has_value());
}

TEST(StreamTimerTest, TtftIsTheFirstTokenChunkAndItlEveryGapAfterIt) {
  const StreamTimer::Clock::time_point t0{};  // only differences matter
  StreamTimer timer(t0 + milliseconds(1000));
  timer.OnChunk(t0 + milliseconds(1050), false);  // an empty chunk times nothing
  timer.OnChunk(t0 + milliseconds(1100), true);
  timer.OnChunk(t0 + milliseconds(1150), false);
  timer.OnChunk(t0 + milliseconds(1200), true);
  timer.OnChunk(t0 + milliseconds(1350), true);
  timer.OnEnd(t0 + milliseconds(1400));
  RequestOutcome r;
  timer.Fill(r);
  EXPECT_EQ(timer.n_token_chunks(), 3);
  EXPECT_NEAR(r.ttft_s, 0.1, 1e-9);
  ASSERT_EQ(r.itl_s.size(), 2u);
  EXPECT_NEAR(r.itl_s[0], 0.1, 1e-9);
  EXPECT_NEAR(r.itl_s[1], 0.15, 1e-9);
  EXPECT_NEAR(r.e2e_s, 0.4, 1e-9);
}

TEST(StreamTimerTest, NoTokensMeansNoTtftAndNoItl) {
  const StreamTimer::Clock::time_point t0{};
  StreamTimer timer(t0 + milliseconds(10));
  timer.OnChunk(t0 + milliseconds(20), false);
  timer.OnEnd(t0 + milliseconds(30));
  RequestOutcome r;
  timer.Fill(r);
  EXPECT_EQ(r.ttft_s, 0);
  EXPECT_TRUE(r.itl_s.empty());
  EXPECT_NEAR(r.e2e_s, 0.02, 1e-9);
}

TEST(SloTest, BothBoundsInclusiveAndOneTokenCountsTpotZero) {
  const Slo slo{.ttft_s = 0.5, .tpot_s = 0.1};
  EXPECT_TRUE(MeetsSlo(Ok(0.5, 0.9, 5), slo));    // TTFT at the bound, TPOT 0.1 at the bound
  EXPECT_FALSE(MeetsSlo(Ok(0.51, 0.9, 5), slo));  // TTFT over
  EXPECT_FALSE(MeetsSlo(Ok(0.2, 1.0, 5), slo));   // TPOT 0.2 over
  EXPECT_TRUE(MeetsSlo(Ok(0.2, 9.0, 1), slo));    // one token: TPOT 0
  EXPECT_FALSE(MeetsSlo(Failed("UNAVAILABLE"), slo));
  EXPECT_TRUE(MeetsSlo(Ok(5, 50, 5), Slo{}));     // no SLO: every completed request
  EXPECT_TRUE(MeetsSlo(Ok(0.2, 50, 5), Slo{.ttft_s = 0.3, .tpot_s = std::nullopt}));  // TPOT unchecked
}

TEST(ServeMetricsTest, CountsThroughputGoodputAndErrorsByCode) {
  std::vector<RequestOutcome> outcomes = {
      Ok(0.1, 0.5, 5, 100, {0.1, 0.1, 0.1, 0.1}),  // TPOT 0.1: good
      Ok(0.3, 1.3, 3, 200, {0.5, 0.5}),            // TPOT 0.5: TPOT SLO missed
      Ok(0.9, 0.9, 1, 50),                         // TTFT SLO missed
      Failed("UNAVAILABLE"),
      Failed("UNAVAILABLE"),
      Failed("HTTP_503"),
  };
  const ServeMetrics m = ComputeServeMetrics(outcomes, 2.0, Slo{.ttft_s = 0.5, .tpot_s = 0.2});
  EXPECT_EQ(m.completed, 3);
  EXPECT_EQ(m.failed, 3);
  EXPECT_EQ(m.errors.at("UNAVAILABLE"), 2);
  EXPECT_EQ(m.errors.at("HTTP_503"), 1);
  EXPECT_EQ(m.total_input_tokens, 350);
  EXPECT_EQ(m.total_output_tokens, 9);
  EXPECT_DOUBLE_EQ(m.request_throughput, 1.5);
  EXPECT_DOUBLE_EQ(m.output_throughput, 4.5);
  EXPECT_DOUBLE_EQ(m.total_token_throughput, 179.5);
  ASSERT_TRUE(m.good_requests.has_value());
  EXPECT_EQ(*m.good_requests, 1);
  EXPECT_DOUBLE_EQ(*m.request_goodput, 0.5);
  // TTFT and E2E over the completed requests; TPOT only where there is more than one token; ITL
  // pooled over all requests.
  EXPECT_EQ(m.ttft_s.count, 3);
  EXPECT_NEAR(m.ttft_s.mean, (0.1 + 0.3 + 0.9) / 3, 1e-12);
  EXPECT_EQ(m.tpot_s.count, 2);
  EXPECT_NEAR(m.tpot_s.mean, 0.3, 1e-12);
  EXPECT_EQ(m.itl_s.count, 6);
  EXPECT_NEAR(m.itl_s.median, 0.1, 1e-12);
  EXPECT_EQ(m.e2e_s.count, 3);
  EXPECT_NEAR(m.e2e_s.max, 1.3, 1e-12);
}

TEST(ServeMetricsTest, NoSloNoGoodput) {
  const ServeMetrics m = ComputeServeMetrics({Ok(0.1, 0.5, 5)}, 1.0, Slo{});
  EXPECT_FALSE(m.good_requests.has_value());
  EXPECT_FALSE(m.request_goodput.has_value());
  EXPECT_EQ(m.completed, 1);
}

TEST(PoissonArrivalsTest, MeanRateWithinToleranceForAFixedSeed) {
  const int32_t n = 20000;
  const double rate = 5.0;
  const std::vector<double> a = PoissonArrivals(n, rate, 1234);
  ASSERT_EQ(a.size(), static_cast<size_t>(n));
  EXPECT_GT(a.front(), 0.0);
  double sum = 0, squares = 0, previous = 0;
  for (double t : a) {
    ASSERT_GE(t, previous);
    const double gap = t - previous;
    sum += gap;
    squares += gap * gap;
    previous = t;
  }
  const double mean_gap = sum / n;
  EXPECT_NEAR(n / a.back(), rate, rate * 0.03);
  // Exponential gaps: standard deviation equals the mean.
  const double sd = std::sqrt(squares / n - mean_gap * mean_gap);
  EXPECT_NEAR(sd / mean_gap, 1.0, 0.05);
}

TEST(PoissonArrivalsTest, SeededAndInfiniteRateSendsAllAtOnce) {
  EXPECT_EQ(PoissonArrivals(50, 2.0, 7), PoissonArrivals(50, 2.0, 7));
  EXPECT_NE(PoissonArrivals(50, 2.0, 7), PoissonArrivals(50, 2.0, 8));
  for (double t : PoissonArrivals(10, INFINITY, 7)) EXPECT_EQ(t, 0.0);
  EXPECT_TRUE(PoissonArrivals(0, 2.0, 7).empty());
}

TEST(UniformLengthsTest, RangeRatioBoundsAndMean) {
  std::mt19937_64 rng(3);
  for (int32_t l : UniformLengths(100, 256, 0.0, rng)) EXPECT_EQ(l, 256);
  const std::vector<int32_t> lengths = UniformLengths(20000, 100, 0.5, rng);
  double sum = 0;
  int32_t lo = 1 << 30, hi = 0;
  for (int32_t l : lengths) {
    sum += l;
    lo = std::min(lo, l);
    hi = std::max(hi, l);
  }
  EXPECT_EQ(lo, 50);
  EXPECT_EQ(hi, 150);
  EXPECT_NEAR(sum / lengths.size(), 100.0, 1.0);
  std::mt19937_64 small(3);
  for (int32_t l : UniformLengths(100, 1, 0.9, small)) EXPECT_GE(l, 1);
}

TEST(UniformIntTest, StaysInBounds) {
  std::mt19937_64 rng(9);
  for (int i = 0; i < 1000; ++i) {
    const int64_t x = UniformInt(rng, -3, 3);
    EXPECT_GE(x, -3);
    EXPECT_LE(x, 3);
  }
  EXPECT_EQ(UniformInt(rng, 5, 5), 5);
}

}  // namespace
}  // namespace baton::bench
