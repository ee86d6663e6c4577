#include "metrics/process_metrics.h"

#include <dirent.h>
#include <sys/resource.h>
#include <unistd.h>

#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"

namespace baton::metrics {
namespace {

absl::StatusOr<std::string> ReadProcFile(const char* path) {
  std::ifstream in(path);
  if (!in) return absl::UnavailableError(absl::StrCat("cannot read ", path));
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// The fields of /proc/self/stat after "pid (comm)": [0] is field 3 (state), so field N of
// proc(5) is [N - 3]. comm may hold spaces and parentheses; it ends at the last ')'.
absl::StatusOr<std::vector<absl::string_view>> StatFields(const std::string& stat) {
  const size_t paren = stat.rfind(')');
  if (paren == std::string::npos) return absl::UnavailableError("malformed /proc/self/stat");
  std::vector<absl::string_view> fields = absl::StrSplit(
      absl::string_view(stat).substr(paren + 1), absl::ByAnyChar(" \n"), absl::SkipEmpty());
  if (fields.size() < 22) return absl::UnavailableError("short /proc/self/stat");
  return fields;
}

double Field(const std::vector<absl::string_view>& fields, int proc5_number) {
  double value = 0;
  if (!absl::SimpleAtod(fields[proc5_number - 3], &value)) return 0;
  return value;
}

// Seconds since the epoch at boot (/proc/stat "btime"), or 0.
double BootTime() {
  absl::StatusOr<std::string> stat = ReadProcFile("/proc/stat");
  if (!stat.ok()) return 0;
  for (absl::string_view line : absl::StrSplit(*stat, '\n')) {
    double value = 0;
    if (absl::ConsumePrefix(&line, "btime ") && absl::SimpleAtod(line, &value)) return value;
  }
  return 0;
}

double CountOpenFds() {
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return 0;
  double n = 0;
  while (const dirent* entry = readdir(dir)) {
    if (entry->d_name[0] != '.') ++n;
  }
  closedir(dir);
  return n;
}

}  // namespace

absl::StatusOr<ProcessStats> ReadProcessStats() {
  absl::StatusOr<std::string> stat = ReadProcFile("/proc/self/stat");
  if (!stat.ok()) return stat.status();
  absl::StatusOr<std::vector<absl::string_view>> fields = StatFields(*stat);
  if (!fields.ok()) return fields.status();
  const double ticks = static_cast<double>(sysconf(_SC_CLK_TCK));
  const double page = static_cast<double>(sysconf(_SC_PAGESIZE));
  ProcessStats s;
  s.cpu_seconds = (Field(*fields, 14) + Field(*fields, 15)) / ticks;  // utime + stime
  s.start_time_seconds = BootTime() + Field(*fields, 22) / ticks;     // starttime
  s.virtual_memory_bytes = Field(*fields, 23);                         // vsize
  s.resident_memory_bytes = Field(*fields, 24) * page;                 // rss
  s.open_fds = CountOpenFds();
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) == 0) s.max_fds = static_cast<double>(limit.rlim_cur);
  return s;
}

Registry::CollectorId AddProcessCollector(Registry& registry) {
  return registry.AddCollector([&registry] {
    absl::StatusOr<ProcessStats> s = ReadProcessStats();
    if (!s.ok()) return;
    Counter& cpu = registry.GetCounter("process_cpu_seconds_total",
                                       "Total user and system CPU time spent in seconds.");
    // Collectors run one at a time, so nothing else moves this counter between read and add.
    if (s->cpu_seconds > cpu.value()) cpu.Increment(s->cpu_seconds - cpu.value());
    registry.GetGauge("process_resident_memory_bytes", "Resident memory size in bytes.")
        .Set(s->resident_memory_bytes);
    registry.GetGauge("process_virtual_memory_bytes", "Virtual memory size in bytes.")
        .Set(s->virtual_memory_bytes);
    registry
        .GetGauge("process_start_time_seconds",
                  "Start time of the process since unix epoch in seconds.")
        .Set(s->start_time_seconds);
    registry.GetGauge("process_open_fds", "Number of open file descriptors.").Set(s->open_fds);
    registry.GetGauge("process_max_fds", "Maximum number of open file descriptors.")
        .Set(s->max_fds);
  });
}

}  // namespace baton::metrics
