// --plot of `baton bench serve`: a PNG of the latency distributions (empirical CDFs of TTFT, TPOT,
// ITL and E2E, one panel each) drawn by gnuplot. Writes OUT.dat (the data, one block per metric)
// and OUT.gp (the script) next to OUT.png and runs `gnuplot OUT.gp`; both files stay, so the plot
// can be restyled by hand.
//
// Thread-safety: thread-compatible.
#ifndef BATON_BENCH_LATENCY_PLOT_H_
#define BATON_BENCH_LATENCY_PLOT_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "bench/latency_stats.h"

namespace baton::bench {

// The data file's text: four blocks (TTFT, TPOT, ITL, E2E) separated by two blank lines, each
// line "latency_ms cumulative_fraction", sorted.
std::string LatencyCdfData(const std::vector<RequestOutcome>& outcomes);

// NOT_FOUND (saying to install gnuplot-nox) when gnuplot is not on PATH; INTERNAL when it fails;
// the data and script are written either way.
absl::Status WriteLatencyPlot(const std::vector<RequestOutcome>& outcomes,
                              const std::string& png_path, const std::string& title);

}  // namespace baton::bench

#endif  // BATON_BENCH_LATENCY_PLOT_H_
