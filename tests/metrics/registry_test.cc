// metrics::Registry: counter, gauge and histogram semantics, labels, collectors, and the
// Prometheus text exposition format (0.0.4) byte for byte.
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "metrics/metrics.h"

namespace baton::metrics {
namespace {

using testing::ElementsAre;
using testing::HasSubstr;
using testing::Not;
using testing::Pair;

TEST(CounterTest, StartsAtZeroAndOnlyGoesUp) {
  Counter c;
  EXPECT_EQ(c.value(), 0);
  c.Increment();
  c.Increment(2.5);
  c.Increment(0);
  EXPECT_EQ(c.value(), 3.5);
}

TEST(CounterDeathTest, NegativeIncrementIsAProgrammerError) {
  Counter c;
  EXPECT_DEATH(c.Increment(-1), "counter increment must be >= 0");
}

TEST(GaugeTest, SetAndAdd) {
  Gauge g;
  EXPECT_EQ(g.value(), 0);
  g.Set(7);
  g.Add(-2.5);
  EXPECT_EQ(g.value(), 4.5);
  g.Set(-1);
  EXPECT_EQ(g.value(), -1);
}

TEST(HistogramTest, BucketsAreUpperBoundsInclusiveAndCumulative) {
  Histogram h({1, 2, 5});
  for (double v : {0.5, 1.0, 1.5, 2.0, 4.0, 5.0, 5.01, 100.0}) h.Observe(v);
  EXPECT_THAT(h.bounds(), ElementsAre(1, 2, 5));
  // <=1: 0.5, 1.0 | <=2: +1.5, 2.0 | <=5: +4, 5 | +Inf: +5.01, 100
  EXPECT_THAT(h.cumulative_counts(), ElementsAre(2, 4, 6, 8));
  EXPECT_EQ(h.count(), 8u);
  EXPECT_DOUBLE_EQ(h.sum(), 0.5 + 1 + 1.5 + 2 + 4 + 5 + 5.01 + 100);
}

TEST(HistogramTest, NegativeValuesGoToTheFirstBucketAndNaNIsIgnored) {
  Histogram h({0, 10});
  h.Observe(-3);
  h.Observe(std::numeric_limits<double>::quiet_NaN());
  h.Observe(std::numeric_limits<double>::infinity());
  EXPECT_THAT(h.cumulative_counts(), ElementsAre(1, 1, 2));
}

TEST(HistogramTest, TrailingInfBoundIsImplicit) {
  Histogram h({1, std::numeric_limits<double>::infinity()});
  EXPECT_THAT(h.bounds(), ElementsAre(1));
  h.Observe(3);
  EXPECT_THAT(h.cumulative_counts(), ElementsAre(0, 1));
}

TEST(HistogramDeathTest, BoundsMustIncrease) {
  EXPECT_DEATH(Histogram({1, 1}), "increase strictly");
  EXPECT_DEATH(Histogram({2, 1}), "increase strictly");
}

TEST(BucketsTest, Helpers) {
  EXPECT_THAT(CountBuckets(100), ElementsAre(1, 2, 5, 10, 20, 50, 100));
  EXPECT_THAT(CountBuckets(30), ElementsAre(1, 2, 5, 10, 20, 50));
  EXPECT_THAT(ExponentialBuckets(1, 2, 4), ElementsAre(1, 2, 4, 8));
  const std::vector<double> latency = LatencyBuckets();
  EXPECT_EQ(latency.front(), 0.001);
  EXPECT_EQ(latency.back(), 80);
  EXPECT_TRUE(std::is_sorted(latency.begin(), latency.end()));
  const std::vector<double> bytes = ByteBuckets();
  EXPECT_EQ(bytes.front(), 1024);
  EXPECT_EQ(bytes.back(), 4.0 * 1024 * 1024 * 1024);
}

TEST(RegistryTest, SameNameAndLabelsIsTheSameSeries) {
  Registry r;
  Counter& a = r.GetCounter("requests_total", "Requests.", {{"code", "200"}});
  Counter& b = r.GetCounter("requests_total", "Requests.", {{"code", "200"}});
  Counter& c = r.GetCounter("requests_total", "Requests.", {{"code", "500"}});
  EXPECT_EQ(&a, &b);
  EXPECT_NE(&a, &c);
  a.Increment();
  EXPECT_EQ(b.value(), 1);
  EXPECT_EQ(c.value(), 0);
  EXPECT_EQ(&r.GetGauge("g", "G."), &r.GetGauge("g", "G."));
  EXPECT_EQ(&r.GetHistogram("h", "H.", {1}), &r.GetHistogram("h", "H.", {1}));
}

TEST(RegistryTest, HistogramSeriesShareTheFirstBounds) {
  Registry r;
  r.GetHistogram("h", "H.", {1, 2}, {{"a", "x"}});
  Histogram& other = r.GetHistogram("h", "H.", {5}, {{"a", "y"}});
  EXPECT_THAT(other.bounds(), ElementsAre(1, 2));
}

TEST(RegistryTest, GlobalIsOneInstance) { EXPECT_EQ(&Registry::Global(), &Registry::Global()); }

TEST(RegistryDeathTest, MisuseIsAProgrammerError) {
  Registry r;
  r.GetCounter("x", "X.");
  EXPECT_DEATH(r.GetGauge("x", "X."), "registered as a counter, used as a gauge");
  EXPECT_DEATH(r.GetCounter("bad name", "X."), "invalid metric name");
  EXPECT_DEATH(r.GetCounter("0abc", "X."), "invalid metric name");
  EXPECT_DEATH(r.GetCounter("ok", "X.", {{"bad-label", "v"}}), "invalid label name");
  EXPECT_DEATH(r.GetCounter("ok", "X.", {{"__reserved", "v"}}), "invalid label name");
  EXPECT_DEATH(r.GetCounter("ok", "X.", {{"a:b", "v"}}), "invalid label name");
  EXPECT_DEATH(r.GetHistogram("h", "H.", {1}, {{"le", "1"}}), "cannot have a label named le");
  EXPECT_DEATH(r.SetConstantLabels({{"le", "1"}}), "invalid constant label name");
  EXPECT_DEATH(r.SetConstantLabels({{"bad-label", "1"}}), "invalid constant label name");
}

// _total is the counter suffix: a gauge named so would read as a value that only goes up.
TEST(RegistryDeathTest, GaugeNamedLikeACounterIsAProgrammerError) {
  Registry r;
  EXPECT_DEATH(r.GetGauge("baton:kv_cache_blocks_total", "X."), "must not end in _total");
  EXPECT_DEATH(r.GetGauge("x_total", "X.", {{"a", "b"}}), "must not end in _total");
  r.GetGauge("baton:kv_cache_blocks", "Fine.");
  r.GetGauge("total", "Fine too.");
  r.GetGauge("x_totally", "And this.");
  r.GetCounter("baton:num_preemptions_total", "A counter may.");
}

TEST(RegistryTest, EmptyRegistryRendersNothing) {
  Registry r;
  EXPECT_EQ(r.RenderText(), "");
}

TEST(RegistryTest, ExpositionFormat) {
  Registry r;
  r.GetCounter("baton:request_success_total", "Requests ended, by outcome.",
               {{"finished_reason", "stop"}})
      .Increment(3);
  r.GetCounter("baton:request_success_total", "Requests ended, by outcome.",
               {{"finished_reason", "length"}})
      .Increment();
  r.GetGauge("baton:kv_cache_usage_perc", "KV cache usage.").Set(0.25);
  Histogram& h =
      r.GetHistogram("baton:time_to_first_token_seconds", "Time to first token.", {0.1, 0.5, 1});
  h.Observe(0.05);
  h.Observe(0.5);
  h.Observe(2);
  Histogram& labelled = r.GetHistogram("lat_seconds", "Latency.", {1}, {{"b", "2"}, {"a", "1"}});
  labelled.Observe(0.5);

  // Families sorted by name; series by labels; label names sorted; le last; +Inf bucket = count.
  EXPECT_EQ(r.RenderText(),
            "# HELP baton:kv_cache_usage_perc KV cache usage.\n"
            "# TYPE baton:kv_cache_usage_perc gauge\n"
            "baton:kv_cache_usage_perc 0.25\n"
            "# HELP baton:request_success_total Requests ended, by outcome.\n"
            "# TYPE baton:request_success_total counter\n"
            "baton:request_success_total{finished_reason=\"length\"} 1\n"
            "baton:request_success_total{finished_reason=\"stop\"} 3\n"
            "# HELP baton:time_to_first_token_seconds Time to first token.\n"
            "# TYPE baton:time_to_first_token_seconds histogram\n"
            "baton:time_to_first_token_seconds_bucket{le=\"0.1\"} 1\n"
            "baton:time_to_first_token_seconds_bucket{le=\"0.5\"} 2\n"
            "baton:time_to_first_token_seconds_bucket{le=\"1\"} 2\n"
            "baton:time_to_first_token_seconds_bucket{le=\"+Inf\"} 3\n"
            "baton:time_to_first_token_seconds_sum 2.55\n"
            "baton:time_to_first_token_seconds_count 3\n"
            "# HELP lat_seconds Latency.\n"
            "# TYPE lat_seconds histogram\n"
            "lat_seconds_bucket{a=\"1\",b=\"2\",le=\"1\"} 1\n"
            "lat_seconds_bucket{a=\"1\",b=\"2\",le=\"+Inf\"} 1\n"
            "lat_seconds_sum{a=\"1\",b=\"2\"} 0.5\n"
            "lat_seconds_count{a=\"1\",b=\"2\"} 1\n");
}

TEST(RegistryTest, ConstantLabelsAreOnEverySeries) {
  Registry r;
  r.GetCounter("c_total", "C.").Increment();
  r.GetGauge("g", "G.", {{"a", "1"}, {"z", "2"}}).Set(3);
  r.GetGauge("g", "G.", {{"model_name", "own"}}).Set(4);
  r.GetHistogram("h", "H.", {1}).Observe(0.5);
  r.SetConstantLabels({{"model_name", "Qwen \"0.5B\""}});
  EXPECT_THAT(r.constant_labels(), ElementsAre(Pair("model_name", "Qwen \"0.5B\"")));
  EXPECT_EQ(r.RenderText(),
            "# HELP c_total C.\n"
            "# TYPE c_total counter\n"
            "c_total{model_name=\"Qwen \\\"0.5B\\\"\"} 1\n"
            "# HELP g G.\n"
            "# TYPE g gauge\n"
            "g{a=\"1\",model_name=\"Qwen \\\"0.5B\\\"\",z=\"2\"} 3\n"
            "g{model_name=\"own\"} 4\n"  // the series' own label wins
            "# HELP h H.\n"
            "# TYPE h histogram\n"
            "h_bucket{model_name=\"Qwen \\\"0.5B\\\"\",le=\"1\"} 1\n"
            "h_bucket{model_name=\"Qwen \\\"0.5B\\\"\",le=\"+Inf\"} 1\n"
            "h_sum{model_name=\"Qwen \\\"0.5B\\\"\"} 0.5\n"
            "h_count{model_name=\"Qwen \\\"0.5B\\\"\"} 1\n");
  r.SetConstantLabels({});
  EXPECT_THAT(r.RenderText(), HasSubstr("\nc_total 1\n"));
}

TEST(RegistryTest, EmptyHistogramRendersZeroBuckets) {
  Registry r;
  r.GetHistogram("h", "H.", {1});
  EXPECT_EQ(r.RenderText(),
            "# HELP h H.\n"
            "# TYPE h histogram\n"
            "h_bucket{le=\"1\"} 0\n"
            "h_bucket{le=\"+Inf\"} 0\n"
            "h_sum 0\n"
            "h_count 0\n");
}

TEST(RegistryTest, LabelValuesAndHelpAreEscaped) {
  Registry r;
  r.GetCounter("c_total", "Help with \\ backslash\nand newline; \"quotes\" stay.",
               {{"path", "a\\b\"c\nd"}})
      .Increment();
  EXPECT_EQ(r.RenderText(),
            "# HELP c_total Help with \\\\ backslash\\nand newline; \"quotes\" stay.\n"
            "# TYPE c_total counter\n"
            "c_total{path=\"a\\\\b\\\"c\\nd\"} 1\n");
}

TEST(RegistryTest, FirstHelpTextWins) {
  Registry r;
  r.GetGauge("g", "First.");
  r.GetGauge("g", "Second.", {{"x", "1"}});
  const std::string text = r.RenderText();
  EXPECT_THAT(text, HasSubstr("# HELP g First.\n"));
  EXPECT_THAT(text, Not(HasSubstr("Second.")));
}

TEST(RegistryTest, SampleValuesUseShortestFormAndSpecialValues) {
  Registry r;
  r.GetGauge("a", "A.").Set(1e21);
  r.GetGauge("b", "B.").Set(-0.001);
  r.GetGauge("c", "C.").Set(std::numeric_limits<double>::infinity());
  r.GetGauge("d", "D.").Set(-std::numeric_limits<double>::infinity());
  r.GetGauge("e", "E.").Set(std::numeric_limits<double>::quiet_NaN());
  r.GetGauge("f", "F.").Set(123456789);
  r.GetGauge("g", "G.").Set(0.1 + 0.2);
  const std::string text = r.RenderText();
  EXPECT_THAT(text, HasSubstr("\na 1e+21\n"));
  EXPECT_THAT(text, HasSubstr("\nb -0.001\n"));
  EXPECT_THAT(text, HasSubstr("\nc +Inf\n"));
  EXPECT_THAT(text, HasSubstr("\nd -Inf\n"));
  EXPECT_THAT(text, HasSubstr("\ne NaN\n"));
  EXPECT_THAT(text, HasSubstr("\nf 123456789\n"));
  EXPECT_THAT(text, HasSubstr("\ng 0.30000000000000004\n"));  // round-trips exactly
}

TEST(RegistryTest, CollectorsRunBeforeEachRenderUntilRemoved) {
  Registry r;
  int runs = 0;
  Gauge& g = r.GetGauge("state", "State.");
  const Registry::CollectorId id = r.AddCollector([&] { g.Set(++runs); });
  EXPECT_THAT(r.RenderText(), HasSubstr("\nstate 1\n"));
  EXPECT_THAT(r.RenderText(), HasSubstr("\nstate 2\n"));
  r.RemoveCollector(id);
  EXPECT_THAT(r.RenderText(), HasSubstr("\nstate 2\n"));
  EXPECT_EQ(runs, 2);
  r.RemoveCollector(id);      // already gone: ignored
  r.RemoveCollector(123456);  // unknown: ignored
}

TEST(RegistryTest, CollectorMayCreateSeries) {
  Registry r;
  r.AddCollector([&r] { r.GetGauge("made_by_collector", "Made.").Set(5); });
  EXPECT_THAT(r.RenderText(), HasSubstr("\nmade_by_collector 5\n"));
}

}  // namespace
}  // namespace baton::metrics
