// The standard Prometheus process metrics, read from /proc/self (Linux), as every Prometheus client
// library exports them:
//
//   process_cpu_seconds_total       counter  user + system CPU time
//   process_resident_memory_bytes   gauge    resident set size
//   process_virtual_memory_bytes    gauge    virtual memory size
//   process_start_time_seconds      gauge    start time, seconds since the Unix epoch
//   process_open_fds                gauge    open file descriptors
//   process_max_fds                 gauge    the soft limit on open file descriptors
//
// Registry::Global() collects them before every render, so every baton process exports them.
//
// Thread-safety: ReadProcessStats() from any thread; the collector runs under the registry's
// collector lock.
#ifndef BATON_METRICS_PROCESS_METRICS_H_
#define BATON_METRICS_PROCESS_METRICS_H_

#include "absl/status/statusor.h"
#include "metrics/metrics.h"

namespace baton::metrics {

struct ProcessStats {
  double cpu_seconds = 0;
  double resident_memory_bytes = 0;
  double virtual_memory_bytes = 0;
  double start_time_seconds = 0;
  double open_fds = 0;
  double max_fds = 0;
};

// This process's figures now; UNAVAILABLE where /proc/self cannot be read.
absl::StatusOr<ProcessStats> ReadProcessStats();

// Adds a collector that sets the process_* series of `registry` (none where /proc/self cannot be
// read). Registry::Global() has one already.
Registry::CollectorId AddProcessCollector(Registry& registry);

}  // namespace baton::metrics

#endif  // BATON_METRICS_PROCESS_METRICS_H_
