// Process metrics in the Prometheus text exposition format (version 0.0.4): counters, gauges and
// histograms, optionally labelled, registered by name in one registry per process. Names follow
// vLLM's where they overlap (e.g. baton:time_to_first_token_seconds for vllm:...);
// metrics/README.md lists every metric baton exports.
//
//   static metrics::Histogram& ttft = metrics::Registry::Global().GetHistogram(
//       "baton:time_to_first_token_seconds", "Time to first token.", metrics::LatencyBuckets());
//   ttft.Observe(0.042);
//
// Series live as long as their registry, so a reference may be kept (a function-local static, as
// above, keeps the hot path free of look-ups). Gauges that mirror state may instead be refreshed by
// a collector, a callback the registry runs before each RenderText().
//
// Every series carries the registry's constant labels (SetConstantLabels: model_name, as vLLM's
// series do). Registry::Global() also exports the standard process metrics (process_metrics.h).
//
// Thread-safety: everything is thread-safe; updates are lock-free (atomics) once a series exists.
// Misuse (an invalid name, one name with two kinds, a gauge named *_total, a negative counter
// increment) is a programmer error and CHECK-fails.
#ifndef BATON_METRICS_METRICS_H_
#define BATON_METRICS_METRICS_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace baton::metrics {

using Labels = std::map<std::string, std::string>;

// The Content-Type of RenderText()'s output.
inline constexpr char kTextContentType[] = "text/plain; version=0.0.4; charset=utf-8";

// A value that only goes up.
class Counter {
 public:
  void Increment(double by = 1.0);  // by >= 0
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0};
};

// A value that goes up and down.
class Gauge {
 public:
  void Set(double value) { value_.store(value, std::memory_order_relaxed); }
  void Add(double by) { value_.fetch_add(by, std::memory_order_relaxed); }
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0};
};

// Observations counted in buckets by upper bound (value <= bound), plus their sum and count.
class Histogram {
 public:
  // `bounds`: the upper bounds of the buckets, strictly increasing and finite (+Inf is implicit;
  // a trailing +Inf is dropped).
  explicit Histogram(std::vector<double> bounds);
  // NaN is ignored.
  void Observe(double value);

  const std::vector<double>& bounds() const { return bounds_; }
  // Cumulative counts per bucket, [bounds().size() + 1]: the last (+Inf) is the total count.
  std::vector<uint64_t> cumulative_counts() const;
  uint64_t count() const;
  double sum() const { return sum_.load(std::memory_order_relaxed); }

 private:
  std::vector<double> bounds_;
  std::unique_ptr<std::atomic<uint64_t>[]> counts_;  // [bounds + 1], not cumulative
  std::atomic<double> sum_{0};
};

// Bucket bounds for latencies in seconds (1 ms .. 80 s), for byte sizes (1 KiB .. 4 GiB, x4 each)
// and for counts such as tokens or batch sizes (1, 2, 5, 10, 20, 50, ... up to the first >= max).
std::vector<double> LatencyBuckets();
std::vector<double> ByteBuckets();
std::vector<double> CountBuckets(double max);
// start, start * factor, ... (`count` bounds; start > 0, factor > 1).
std::vector<double> ExponentialBuckets(double start, double factor, int count);

class Registry {
 public:
  Registry() = default;
  Registry(const Registry&) = delete;
  Registry& operator=(const Registry&) = delete;

  // The process's registry (never destroyed), with the process_* metrics of process_metrics.h.
  static Registry& Global();

  // Labels added to every series when rendered, e.g. {{"model_name", "Qwen2.5-0.5B"}}; replaces
  // the previous set. A series' own label of the same name wins. Label names as below ("le" is
  // not allowed, for histograms).
  void SetConstantLabels(Labels labels);
  Labels constant_labels() const;

  // The series for (name, labels), created on first use; the reference stays valid as long as the
  // registry. A name is always used with the same kind (CHECK-fails otherwise); the first help
  // text given for a name is the one exported. Names match [a-zA-Z_:][a-zA-Z0-9_:]*, label names
  // [a-zA-Z_][a-zA-Z0-9_]* (not "__"-prefixed, and not "le" on a histogram). All series of one
  // histogram share the bounds given first. A gauge's name must not end in "_total", the suffix
  // Prometheus reserves for counters (CHECK-fails: a value that goes down must not look like one
  // that only goes up).
  Counter& GetCounter(const std::string& name, const std::string& help, const Labels& labels = {});
  Gauge& GetGauge(const std::string& name, const std::string& help, const Labels& labels = {});
  Histogram& GetHistogram(const std::string& name, const std::string& help,
                          const std::vector<double>& bounds, const Labels& labels = {});

  // A callback run at the start of every RenderText(), e.g. to set gauges from current state. It
  // must not call RenderText(), AddCollector() or RemoveCollector(). Returns an id for removal.
  using CollectorId = uint64_t;
  CollectorId AddCollector(std::function<void()> collect);
  // After it returns, the collector is not running and will not run again. Unknown ids are
  // ignored.
  void RemoveCollector(CollectorId id);

  // Runs the collectors, then renders every series in the text exposition format: families in
  // name order, each with its # HELP and # TYPE lines, its series in label order, each with the
  // constant labels merged into its own.
  std::string RenderText() const;

 private:
  enum class Kind { kCounter, kGauge, kHistogram };
  struct Family {
    Kind kind;
    std::string help;
    std::vector<double> bounds;  // histograms
    std::map<Labels, std::unique_ptr<Counter>> counters;
    std::map<Labels, std::unique_ptr<Gauge>> gauges;
    std::map<Labels, std::unique_ptr<Histogram>> histograms;
  };
  Family& GetFamily(const std::string& name, Kind kind, const std::string& help,
                    const Labels& labels) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Held while collectors run, so that RemoveCollector() waits for a render in progress. Taken
  // before mu_ (a collector may create series).
  mutable absl::Mutex collectors_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  std::map<CollectorId, std::function<void()>> collectors_ ABSL_GUARDED_BY(collectors_mu_);
  CollectorId next_collector_id_ ABSL_GUARDED_BY(collectors_mu_) = 1;

  mutable absl::Mutex mu_;
  std::map<std::string, Family> families_ ABSL_GUARDED_BY(mu_);
  Labels constant_labels_ ABSL_GUARDED_BY(mu_);
};

}  // namespace baton::metrics

#endif  // BATON_METRICS_METRICS_H_
