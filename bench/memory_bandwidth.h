// Measures the machine's memory read bandwidth: the denominator of the decode roofline.
//
// Thread-safety: a plain function; it starts and joins its own threads.
#ifndef BATON_BENCH_MEMORY_BANDWIDTH_H_
#define BATON_BENCH_MEMORY_BANDWIDTH_H_

#include <cstddef>

namespace baton::bench {

// Best-of-`repeats` bytes/second reading a `bytes` buffer (much larger than the caches) with
// `n_threads` threads, each summing its own contiguous slice.
double MeasureReadBandwidth(int n_threads, size_t bytes = size_t{1} << 30, int repeats = 5);

}  // namespace baton::bench

#endif  // BATON_BENCH_MEMORY_BANDWIDTH_H_
