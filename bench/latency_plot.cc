#include "bench/latency_plot.h"

#include <spawn.h>
#include <sys/wait.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"

extern char** environ;

namespace baton::bench {
namespace {

struct Metric {
  const char* title;
  std::vector<double> ms;  // sorted
};

std::vector<Metric> Metrics(const std::vector<RequestOutcome>& outcomes) {
  std::vector<Metric> m = {{"TTFT (time to first token)", {}},
                           {"TPOT (time per output token)", {}},
                           {"ITL (inter-token latency)", {}},
                           {"E2E (end-to-end latency)", {}}};
  for (const RequestOutcome& r : outcomes) {
    if (!r.ok) continue;
    m[0].ms.push_back(r.ttft_s * 1e3);
    if (std::optional<double> tpot = Tpot(r)) m[1].ms.push_back(*tpot * 1e3);
    for (double gap : r.itl_s) m[2].ms.push_back(gap * 1e3);
    m[3].ms.push_back(r.e2e_s * 1e3);
  }
  for (Metric& metric : m) std::sort(metric.ms.begin(), metric.ms.end());
  return m;
}

// A gnuplot single-quoted string.
std::string Quoted(const std::string& s) {
  return absl::StrCat("'", absl::StrReplaceAll(s, {{"'", "''"}}), "'");
}

absl::Status WriteFile(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  out.close();
  if (!out) return absl::InternalError(absl::StrCat("cannot write ", path));
  return absl::OkStatus();
}

}  // namespace

std::string LatencyCdfData(const std::vector<RequestOutcome>& outcomes) {
  std::string text;
  for (const Metric& m : Metrics(outcomes)) {
    absl::StrAppend(&text, "# ", m.title, ": latency_ms cumulative_fraction\n");
    const double n = static_cast<double>(m.ms.size());
    for (size_t i = 0; i < m.ms.size(); ++i) {
      absl::StrAppendFormat(&text, "%.6f %.6f\n", m.ms[i], (i + 1) / n);
    }
    absl::StrAppend(&text, "\n\n");
  }
  return text;
}

absl::Status WriteLatencyPlot(const std::vector<RequestOutcome>& outcomes,
                              const std::string& png_path, const std::string& title) {
  std::string stem = png_path;
  if (stem.size() > 4 && stem.substr(stem.size() - 4) == ".png") stem.resize(stem.size() - 4);
  const std::string data_path = stem + ".dat";
  const std::string script_path = stem + ".gp";
  if (absl::Status s = WriteFile(data_path, LatencyCdfData(outcomes)); !s.ok()) return s;

  const std::vector<Metric> metrics = Metrics(outcomes);
  std::string gp;
  absl::StrAppend(&gp, "# gnuplot script written by `baton bench serve --plot`\n",
                  "set terminal pngcairo size 1400,1000 noenhanced font ',10'\n",
                  "set output ", Quoted(png_path), "\n",
                  "set multiplot layout 2,2 title ", Quoted(title), "\n",
                  "set grid\nset key off\nset yrange [0:1.02]\nset style textbox opaque noborder\n",
                  "set xlabel 'ms'\nset ylabel 'cumulative fraction'\n");
  for (size_t i = 0; i < metrics.size(); ++i) {
    const Metric& m = metrics[i];
    absl::StrAppend(&gp, "unset arrow\nunset label\nset title ", Quoted(m.title), "\n");
    if (m.ms.empty()) {
      absl::StrAppend(&gp, "set label 'no data' at graph 0.45, graph 0.5\nplot [0:1] 1/0\n");
      continue;
    }
    const double p50 = PercentileOfSorted(m.ms, 50);
    const double p90 = PercentileOfSorted(m.ms, 90);
    const double p99 = PercentileOfSorted(m.ms, 99);
    // Dashed lines at p50 and p99; the values in the top left corner, which a CDF leaves empty.
    absl::StrAppendFormat(
        &gp,
        "set arrow from %.6f, graph 0 to %.6f, graph 1 nohead dt 2 lc rgb 'gray40'\n"
        "set arrow from %.6f, graph 0 to %.6f, graph 1 nohead dt 2 lc rgb 'red'\n"
        "set label 'n %d   p50 %.1f   p90 %.1f   p99 %.1f ms' at graph 0.03, graph 0.93 front boxed\n",
        p50, p50, p99, p99, m.ms.size(), p50, p90, p99);
    absl::StrAppend(&gp, "plot ", Quoted(data_path), " index ", i,
                    " using 1:2 with steps lw 2 lc rgb '#1f77b4'\n");
  }
  absl::StrAppend(&gp, "unset multiplot\n");
  if (absl::Status s = WriteFile(script_path, gp); !s.ok()) return s;

  std::string program = "gnuplot";
  std::string script_arg = script_path;
  char* argv[] = {program.data(), script_arg.data(), nullptr};
  pid_t pid = 0;
  const int spawned = posix_spawnp(&pid, "gnuplot", nullptr, nullptr, argv, environ);
  if (spawned == ENOENT) {
    return absl::NotFoundError(absl::StrCat(
        "gnuplot is not installed, so no ", png_path, " (apt-get install gnuplot-nox, or "
        "scripts/setup.sh); the data and script are in ", data_path, " and ", script_path));
  }
  if (spawned != 0) {
    return absl::InternalError(absl::StrCat("cannot run gnuplot: ", std::strerror(spawned)));
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    return absl::InternalError(absl::StrCat("gnuplot failed on ", script_path));
  }
  return absl::OkStatus();
}

}  // namespace baton::bench
