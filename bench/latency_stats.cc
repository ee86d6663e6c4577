#include "bench/latency_stats.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

namespace baton::bench {

double PercentileOfSorted(std::span<const double> sorted, double p) {
  if (sorted.empty()) return 0;
  p = std::clamp(p, 0.0, 100.0);
  const double rank = p / 100.0 * static_cast<double>(sorted.size() - 1);
  const size_t below = static_cast<size_t>(std::floor(rank));
  const size_t above = std::min(below + 1, sorted.size() - 1);
  const double fraction = rank - static_cast<double>(below);
  return sorted[below] + (sorted[above] - sorted[below]) * fraction;
}

LatencySummary Summarize(std::vector<double> values) {
  LatencySummary s;
  if (values.empty()) return s;
  std::sort(values.begin(), values.end());
  s.count = static_cast<int64_t>(values.size());
  const double n = static_cast<double>(values.size());
  s.mean = std::accumulate(values.begin(), values.end(), 0.0) / n;
  double squares = 0;
  for (double v : values) squares += (v - s.mean) * (v - s.mean);
  s.stdev = std::sqrt(squares / n);
  s.median = PercentileOfSorted(values, 50);
  s.p90 = PercentileOfSorted(values, 90);
  s.p99 = PercentileOfSorted(values, 99);
  s.min = values.front();
  s.max = values.back();
  return s;
}

void StreamTimer::OnChunk(Clock::time_point at, bool has_tokens) {
  if (!has_tokens) return;
  if (n_token_chunks_ == 0) {
    first_ = at;
  } else {
    itl_s_.push_back(std::chrono::duration<double>(at - last_).count());
  }
  last_ = at;
  ++n_token_chunks_;
}

void StreamTimer::Fill(RequestOutcome& outcome) const {
  Clock::time_point end = end_;
  if (end == Clock::time_point{}) end = n_token_chunks_ > 0 ? last_ : sent_;
  outcome.ttft_s = n_token_chunks_ > 0 ? std::chrono::duration<double>(first_ - sent_).count() : 0;
  outcome.e2e_s = std::chrono::duration<double>(end - sent_).count();
  outcome.itl_s = itl_s_;
}

std::optional<double> Tpot(const RequestOutcome& r) {
  if (!r.ok || r.output_tokens <= 1) return std::nullopt;
  return (r.e2e_s - r.ttft_s) / static_cast<double>(r.output_tokens - 1);
}

bool MeetsSlo(const RequestOutcome& r, const Slo& slo) {
  if (!r.ok) return false;
  if (slo.ttft_s && r.ttft_s > *slo.ttft_s) return false;
  if (slo.tpot_s && Tpot(r).value_or(0.0) > *slo.tpot_s) return false;
  return true;
}

ServeMetrics ComputeServeMetrics(const std::vector<RequestOutcome>& outcomes, double duration_s,
                                 const Slo& slo) {
  ServeMetrics m;
  m.duration_s = duration_s;
  std::vector<double> ttft, tpot, itl, e2e;
  int32_t good = 0;
  for (const RequestOutcome& r : outcomes) {
    if (!r.ok) {
      ++m.failed;
      ++m.errors[r.error.empty() ? "UNKNOWN" : r.error];
      continue;
    }
    ++m.completed;
    m.total_input_tokens += r.prompt_tokens;
    m.total_output_tokens += r.output_tokens;
    ttft.push_back(r.ttft_s);
    e2e.push_back(r.e2e_s);
    if (std::optional<double> t = Tpot(r)) tpot.push_back(*t);
    itl.insert(itl.end(), r.itl_s.begin(), r.itl_s.end());
    if (MeetsSlo(r, slo)) ++good;
  }
  const double d = duration_s > 0 ? duration_s : std::numeric_limits<double>::infinity();
  m.request_throughput = m.completed / d;
  m.output_throughput = static_cast<double>(m.total_output_tokens) / d;
  m.total_token_throughput = static_cast<double>(m.total_input_tokens + m.total_output_tokens) / d;
  if (slo.any()) {
    m.good_requests = good;
    m.request_goodput = good / d;
  }
  m.ttft_s = Summarize(std::move(ttft));
  m.tpot_s = Summarize(std::move(tpot));
  m.itl_s = Summarize(std::move(itl));
  m.e2e_s = Summarize(std::move(e2e));
  return m;
}

namespace {

// A double uniform in [0, 1) from the top 53 bits.
double Unit(std::mt19937_64& rng) { return static_cast<double>(rng() >> 11) * 0x1.0p-53; }

}  // namespace

std::vector<double> PoissonArrivals(int32_t n, double rate, uint64_t seed) {
  std::vector<double> arrivals(std::max(n, 0), 0.0);
  if (!std::isfinite(rate) || rate <= 0) return arrivals;
  std::mt19937_64 rng(seed);
  double t = 0;
  for (double& a : arrivals) {
    t += -std::log1p(-Unit(rng)) / rate;  // exponential gap with mean 1 / rate
    a = t;
  }
  return arrivals;
}

int64_t UniformInt(std::mt19937_64& rng, int64_t lo, int64_t hi) {
  if (hi <= lo) return lo;
  const uint64_t span = static_cast<uint64_t>(hi - lo) + 1;
  // Rejection sampling: no modulo bias.
  const uint64_t limit = std::numeric_limits<uint64_t>::max() - std::numeric_limits<uint64_t>::max() % span;
  uint64_t x;
  do {
    x = rng();
  } while (x >= limit);
  return lo + static_cast<int64_t>(x % span);
}

std::vector<int32_t> UniformLengths(int32_t n, int32_t len, double range_ratio,
                                    std::mt19937_64& rng) {
  range_ratio = std::clamp(range_ratio, 0.0, 0.999999);
  const int64_t lo = std::max<int64_t>(1, static_cast<int64_t>(std::floor(len * (1 - range_ratio))));
  const int64_t hi = std::max<int64_t>(lo, static_cast<int64_t>(std::ceil(len * (1 + range_ratio))));
  std::vector<int32_t> lengths(std::max(n, 0));
  for (int32_t& l : lengths) l = static_cast<int32_t>(UniformInt(rng, lo, hi));
  return lengths;
}

}  // namespace baton::bench
