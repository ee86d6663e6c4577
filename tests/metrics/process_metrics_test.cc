// The process_* metrics: read from /proc/self, rendered by the global registry's collector under
// the standard Prometheus names and types.
#include "metrics/process_metrics.h"

#include <fcntl.h>
#include <unistd.h>

#include <cmath>
#include <ctime>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "metrics/metrics.h"

namespace baton::metrics {
namespace {

using testing::HasSubstr;

// The value of the sample line `series value` (no labels), or NaN.
double Sample(const std::string& text, const std::string& series) {
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (absl::ConsumePrefix(&line, series + " ")) {
      double value = 0;
      if (absl::SimpleAtod(line, &value)) return value;
    }
  }
  return std::nan("");
}

TEST(ProcessMetricsTest, ReadsThisProcess) {
  absl::StatusOr<ProcessStats> s = ReadProcessStats();
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_GT(s->resident_memory_bytes, 0);
  EXPECT_GE(s->virtual_memory_bytes, s->resident_memory_bytes);
  EXPECT_GE(s->cpu_seconds, 0);
  EXPECT_GT(s->start_time_seconds, 1.5e9);  // after 2017
  EXPECT_LE(s->start_time_seconds, static_cast<double>(std::time(nullptr)) + 1);
  EXPECT_GE(s->open_fds, 3);  // stdin, stdout, stderr
  EXPECT_LE(s->open_fds, s->max_fds);
}

TEST(ProcessMetricsTest, OpenFdsCountsADescriptorOpenedSinceTheLastRead) {
  absl::StatusOr<ProcessStats> before = ReadProcessStats();
  ASSERT_TRUE(before.ok());
  const int fd = open("/dev/null", O_RDONLY);
  ASSERT_GE(fd, 0);
  absl::StatusOr<ProcessStats> after = ReadProcessStats();
  close(fd);
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(after->open_fds, before->open_fds + 1);
}

TEST(ProcessMetricsTest, CollectorRendersTheStandardNamesAndTypes) {
  Registry r;
  AddProcessCollector(r);
  const std::string text = r.RenderText();
  EXPECT_THAT(text, HasSubstr("# TYPE process_cpu_seconds_total counter\n"));
  for (const char* gauge : {"process_resident_memory_bytes", "process_virtual_memory_bytes",
                            "process_start_time_seconds", "process_open_fds", "process_max_fds"}) {
    EXPECT_THAT(text, HasSubstr(std::string("# TYPE ") + gauge + " gauge\n"));
    EXPECT_GT(Sample(text, gauge), 0) << gauge;
  }
  EXPECT_GE(Sample(text, "process_cpu_seconds_total"), 0);
}

TEST(ProcessMetricsTest, CpuSecondsNeverGoDown) {
  Registry r;
  AddProcessCollector(r);
  double previous = 0;
  for (int i = 0; i < 3; ++i) {
    volatile double spin = 0;
    for (int j = 0; j < 5'000'000; ++j) spin = spin + j;  // burn some CPU
    const double now = Sample(r.RenderText(), "process_cpu_seconds_total");
    EXPECT_GE(now, previous);
    previous = now;
  }
}

TEST(ProcessMetricsTest, EveryProcessExportsThemThroughTheGlobalRegistry) {
  const std::string text = Registry::Global().RenderText();
  EXPECT_THAT(text, HasSubstr("# TYPE process_cpu_seconds_total counter\n"));
  EXPECT_THAT(text, HasSubstr("# TYPE process_resident_memory_bytes gauge\n"));
  EXPECT_THAT(text, HasSubstr("# TYPE process_max_fds gauge\n"));
}

}  // namespace
}  // namespace baton::metrics
