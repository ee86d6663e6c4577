// Measures the machine's memory read bandwidth: the denominator of the decode roofline.
//
// Thread-safety: a plain function; it starts and joins its own threads.
#ifndef BATON_BENCH_MEMORY_BANDWIDTH_H_
#define BATON_BENCH_MEMORY_BANDWIDTH_H_

#include <cstddef>
#include <cstdint>
#include <memory>

#include "kernels/backend.h"

namespace baton::bench {

// Best-of-`repeats` bytes/second reading a `bytes` buffer (much larger than the caches) with
// `n_threads` threads, each summing its own contiguous slice.
double MeasureReadBandwidth(int n_threads, size_t bytes = size_t{1} << 30, int repeats = 5);

// A buffer of `bytes` to read between the steps of a measured run, so that a read and the work
// it bounds see the machine at the same moment (on a shared host the bandwidth moves by tens of
// percent between seconds, which a separate measurement does not follow).
//
// Thread-compatible: one caller at a time.
class ReadProbe {
 public:
  explicit ReadProbe(size_t bytes);
  // Seconds to read the whole buffer once, its 4 KiB pieces shared out over the backend's host
  // threads (the engine's own).
  double TimeRead(kernels::Backend& backend);
  size_t bytes() const { return bytes_; }

 private:
  size_t bytes_;
  std::unique_ptr<uint64_t[], void (*)(void*)> data_;
};

}  // namespace baton::bench

#endif  // BATON_BENCH_MEMORY_BANDWIDTH_H_
