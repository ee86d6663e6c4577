#include "metrics/metrics.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>
#include <utility>

#include "absl/log/check.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "metrics/process_metrics.h"

namespace baton::metrics {
namespace {

bool IsNameChar(char c, bool first, bool allow_colon) {
  if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_') return true;
  if (allow_colon && c == ':') return true;
  return !first && c >= '0' && c <= '9';
}

bool IsValidName(const std::string& name, bool allow_colon) {
  if (name.empty()) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    if (!IsNameChar(name[i], i == 0, allow_colon)) return false;
  }
  return true;
}

bool IsValidLabelName(const std::string& name) {
  return IsValidName(name, /*allow_colon=*/false) && name.rfind("__", 0) != 0;
}

// A series' labels with the constant ones merged in; the series' own win.
Labels WithConstantLabels(const Labels& own, const Labels& constant) {
  Labels merged = own;
  merged.insert(constant.begin(), constant.end());
  return merged;
}

// A sample value as Prometheus writes it: shortest round-trip form, NaN, +Inf, -Inf.
void AppendValue(std::string& out, double value) {
  if (std::isnan(value)) {
    out += "NaN";
  } else if (std::isinf(value)) {
    out += value > 0 ? "+Inf" : "-Inf";
  } else {
    char buffer[64];
    const std::to_chars_result r = std::to_chars(buffer, buffer + sizeof(buffer), value);
    out.append(buffer, r.ptr);
  }
}

// Label values: backslash, double quote and line feed escaped.
void AppendEscapedLabelValue(std::string& out, const std::string& value) {
  for (char c : value) {
    switch (c) {
      case '\\':
        out += "\\\\";
        break;
      case '"':
        out += "\\\"";
        break;
      case '\n':
        out += "\\n";
        break;
      default:
        out += c;
    }
  }
}

// HELP text: backslash and line feed escaped.
void AppendEscapedHelp(std::string& out, const std::string& help) {
  for (char c : help) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
}

// name{a="x",b="y"[,le="bound"]}
void AppendSeriesName(std::string& out, const std::string& name, const char* suffix,
                      const Labels& labels, const std::string* le) {
  out += name;
  out += suffix;
  if (labels.empty() && le == nullptr) return;
  out += '{';
  bool first = true;
  for (const auto& [key, value] : labels) {
    if (!first) out += ',';
    first = false;
    out += key;
    out += "=\"";
    AppendEscapedLabelValue(out, value);
    out += '"';
  }
  if (le != nullptr) {
    if (!first) out += ',';
    out += "le=\"";
    out += *le;
    out += '"';
  }
  out += '}';
}

const char* KindName(int kind) {
  switch (kind) {
    case 0:
      return "counter";
    case 1:
      return "gauge";
    default:
      return "histogram";
  }
}

}  // namespace

void Counter::Increment(double by) {
  CHECK(by >= 0) << "counter increment must be >= 0, got " << by;
  value_.fetch_add(by, std::memory_order_relaxed);
}

Histogram::Histogram(std::vector<double> bounds) : bounds_(std::move(bounds)) {
  if (!bounds_.empty() && std::isinf(bounds_.back()) && bounds_.back() > 0) bounds_.pop_back();
  for (size_t i = 0; i < bounds_.size(); ++i) {
    CHECK(std::isfinite(bounds_[i])) << "histogram bound " << i << " is not finite";
    CHECK(i == 0 || bounds_[i - 1] < bounds_[i]) << "histogram bounds must increase strictly";
  }
  counts_ = std::make_unique<std::atomic<uint64_t>[]>(bounds_.size() + 1);
  for (size_t i = 0; i <= bounds_.size(); ++i) counts_[i].store(0, std::memory_order_relaxed);
}

void Histogram::Observe(double value) {
  if (std::isnan(value)) return;
  const size_t bucket = std::lower_bound(bounds_.begin(), bounds_.end(), value) - bounds_.begin();
  counts_[bucket].fetch_add(1, std::memory_order_relaxed);
  sum_.fetch_add(value, std::memory_order_relaxed);
}

std::vector<uint64_t> Histogram::cumulative_counts() const {
  std::vector<uint64_t> out(bounds_.size() + 1);
  uint64_t total = 0;
  for (size_t i = 0; i <= bounds_.size(); ++i) {
    total += counts_[i].load(std::memory_order_relaxed);
    out[i] = total;
  }
  return out;
}

uint64_t Histogram::count() const {
  uint64_t total = 0;
  for (size_t i = 0; i <= bounds_.size(); ++i) total += counts_[i].load(std::memory_order_relaxed);
  return total;
}

std::vector<double> LatencyBuckets() {
  return {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1,  0.25, 0.5,
          0.75,  1.0,    2.5,   5.0,  7.5,   10.0, 20.0,  40.0, 80.0};
}

std::vector<double> ByteBuckets() { return ExponentialBuckets(1024, 4, 12); }

std::vector<double> ExponentialBuckets(double start, double factor, int count) {
  CHECK(start > 0 && factor > 1 && count >= 0) << "bad exponential buckets";
  std::vector<double> out;
  double bound = start;
  for (int i = 0; i < count; ++i, bound *= factor) out.push_back(bound);
  return out;
}

std::vector<double> CountBuckets(double max) {
  std::vector<double> out;
  for (double decade = 1;; decade *= 10) {
    for (double m : {1.0, 2.0, 5.0}) {
      out.push_back(m * decade);
      if (m * decade >= max) return out;
    }
  }
}

Registry& Registry::Global() {
  static Registry* const registry = [] {
    auto* r = new Registry();
    AddProcessCollector(*r);
    return r;
  }();
  return *registry;
}

void Registry::SetConstantLabels(Labels labels) {
  for (const auto& [key, value] : labels) {
    CHECK(IsValidLabelName(key) && key != "le") << "invalid constant label name '" << key << "'";
  }
  absl::MutexLock lock(&mu_);
  constant_labels_ = std::move(labels);
}

Labels Registry::constant_labels() const {
  absl::MutexLock lock(&mu_);
  return constant_labels_;
}

Registry::Family& Registry::GetFamily(const std::string& name, Kind kind, const std::string& help,
                                      const Labels& labels) {
  CHECK(IsValidName(name, /*allow_colon=*/true)) << "invalid metric name '" << name << "'";
  for (const auto& [key, value] : labels) {
    CHECK(IsValidLabelName(key)) << "invalid label name '" << key << "' on metric " << name;
    CHECK(kind != Kind::kHistogram || key != "le")
        << "histogram " << name << " cannot have a label named le";
  }
  auto [it, inserted] = families_.try_emplace(name);
  Family& family = it->second;
  if (inserted) {
    family.kind = kind;
    family.help = help;
  }
  CHECK(family.kind == kind) << "metric " << name << " registered as a "
                             << KindName(static_cast<int>(family.kind)) << ", used as a "
                             << KindName(static_cast<int>(kind));
  return family;
}

Counter& Registry::GetCounter(const std::string& name, const std::string& help,
                              const Labels& labels) {
  absl::MutexLock lock(&mu_);
  std::unique_ptr<Counter>& series = GetFamily(name, Kind::kCounter, help, labels).counters[labels];
  if (series == nullptr) series = std::make_unique<Counter>();
  return *series;
}

Gauge& Registry::GetGauge(const std::string& name, const std::string& help, const Labels& labels) {
  CHECK(!absl::EndsWith(name, "_total"))
      << "gauge " << name << " must not end in _total (the suffix of counters)";
  absl::MutexLock lock(&mu_);
  std::unique_ptr<Gauge>& series = GetFamily(name, Kind::kGauge, help, labels).gauges[labels];
  if (series == nullptr) series = std::make_unique<Gauge>();
  return *series;
}

Histogram& Registry::GetHistogram(const std::string& name, const std::string& help,
                                  const std::vector<double>& bounds, const Labels& labels) {
  absl::MutexLock lock(&mu_);
  Family& family = GetFamily(name, Kind::kHistogram, help, labels);
  if (family.histograms.empty() && family.bounds.empty()) family.bounds = bounds;
  std::unique_ptr<Histogram>& series = family.histograms[labels];
  if (series == nullptr) series = std::make_unique<Histogram>(family.bounds);
  return *series;
}

Registry::CollectorId Registry::AddCollector(std::function<void()> collect) {
  absl::MutexLock lock(&collectors_mu_);
  const CollectorId id = next_collector_id_++;
  collectors_.emplace(id, std::move(collect));
  return id;
}

void Registry::RemoveCollector(CollectorId id) {
  absl::MutexLock lock(&collectors_mu_);
  collectors_.erase(id);
}

std::string Registry::RenderText() const {
  {
    absl::MutexLock lock(&collectors_mu_);
    for (const auto& [id, collect] : collectors_) collect();
  }
  std::string out;
  absl::MutexLock lock(&mu_);
  const Labels& constant = constant_labels_;
  for (const auto& [name, family] : families_) {
    out += "# HELP ";
    out += name;
    out += ' ';
    AppendEscapedHelp(out, family.help);
    out += "\n# TYPE ";
    out += name;
    out += ' ';
    out += KindName(static_cast<int>(family.kind));
    out += '\n';
    switch (family.kind) {
      case Kind::kCounter:
        for (const auto& [labels, counter] : family.counters) {
          AppendSeriesName(out, name, "", WithConstantLabels(labels, constant), nullptr);
          out += ' ';
          AppendValue(out, counter->value());
          out += '\n';
        }
        break;
      case Kind::kGauge:
        for (const auto& [labels, gauge] : family.gauges) {
          AppendSeriesName(out, name, "", WithConstantLabels(labels, constant), nullptr);
          out += ' ';
          AppendValue(out, gauge->value());
          out += '\n';
        }
        break;
      case Kind::kHistogram:
        for (const auto& [own_labels, histogram] : family.histograms) {
          const Labels labels = WithConstantLabels(own_labels, constant);
          // One snapshot of the buckets, so that the +Inf bucket and _count agree.
          const std::vector<uint64_t> counts = histogram->cumulative_counts();
          const double sum = histogram->sum();
          const std::vector<double>& bounds = histogram->bounds();
          for (size_t i = 0; i <= bounds.size(); ++i) {
            std::string le;
            if (i < bounds.size()) {
              AppendValue(le, bounds[i]);
            } else {
              le = "+Inf";
            }
            AppendSeriesName(out, name, "_bucket", labels, &le);
            absl::StrAppend(&out, " ", counts[i], "\n");
          }
          AppendSeriesName(out, name, "_sum", labels, nullptr);
          out += ' ';
          AppendValue(out, sum);
          out += '\n';
          AppendSeriesName(out, name, "_count", labels, nullptr);
          absl::StrAppend(&out, " ", counts.back(), "\n");
        }
        break;
    }
  }
  return out;
}

}  // namespace baton::metrics
