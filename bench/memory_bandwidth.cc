#include "bench/memory_bandwidth.h"

#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

namespace baton::bench {
namespace {

// Sums 64-byte lines with 256-bit loads (AVX2 is the baseline baton requires for speed; the
// compiler may emit anything equivalent).
__attribute__((target("avx2"))) uint64_t SumSlice(const uint64_t* data, size_t n) {
  __m256i acc0 = _mm256_setzero_si256();
  __m256i acc1 = _mm256_setzero_si256();
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    acc0 = _mm256_add_epi64(acc0, _mm256_load_si256(reinterpret_cast<const __m256i*>(data + i)));
    acc1 = _mm256_add_epi64(acc1,
                            _mm256_load_si256(reinterpret_cast<const __m256i*>(data + i + 4)));
  }
  acc0 = _mm256_add_epi64(acc0, acc1);
  uint64_t lanes[4];
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(lanes), acc0);
  uint64_t sum = lanes[0] + lanes[1] + lanes[2] + lanes[3];
  for (; i < n; ++i) sum += data[i];
  return sum;
}

constexpr size_t kProbePiece = 4096;

}  // namespace

ReadProbe::ReadProbe(size_t bytes)
    : bytes_(std::max(kProbePiece, bytes / kProbePiece * kProbePiece)),
      data_(static_cast<uint64_t*>(std::aligned_alloc(64, bytes_)), &std::free) {
  std::memset(data_.get(), 1, bytes_);
}

double ReadProbe::TimeRead(kernels::Backend& backend) {
  constexpr size_t kWords = kProbePiece / sizeof(uint64_t);
  std::vector<uint64_t> sums(static_cast<size_t>(backend.host_threads()) * 8);  // a line each
  const auto start = std::chrono::steady_clock::now();
  backend.ParallelForOnHost(static_cast<int64_t>(bytes_ / kProbePiece),
                            [&](int64_t begin, int64_t end, int thread) {
                              sums[thread * 8] +=
                                  SumSlice(data_.get() + begin * kWords, (end - begin) * kWords);
                            });
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  // Keep the sums observable so the reads cannot be optimized away.
  volatile uint64_t sink = 0;
  for (uint64_t s : sums) sink = sink + s;
  return seconds;
}

double MeasureReadBandwidth(int n_threads, size_t bytes, int repeats) {
  n_threads = std::max(1, n_threads);
  const size_t n = bytes / sizeof(uint64_t);
  std::unique_ptr<uint64_t[], decltype(&std::free)> data(
      static_cast<uint64_t*>(std::aligned_alloc(64, n * sizeof(uint64_t))), &std::free);
  // Touch every page from the thread that will read it (first-touch placement).
  const size_t per_thread = (n / n_threads) & ~size_t{7};
  std::vector<std::thread> threads;
  for (int t = 0; t < n_threads; ++t) {
    threads.emplace_back([&, t] {
      std::memset(data.get() + t * per_thread, t + 1, per_thread * sizeof(uint64_t));
    });
  }
  for (auto& th : threads) th.join();
  double best = 0;
  std::vector<uint64_t> sums(n_threads);
  for (int r = 0; r < repeats; ++r) {
    threads.clear();
    const auto start = std::chrono::steady_clock::now();
    for (int t = 0; t < n_threads; ++t) {
      threads.emplace_back(
          [&, t] { sums[t] = SumSlice(data.get() + t * per_thread, per_thread); });
    }
    for (auto& th : threads) th.join();
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    best = std::max(best, static_cast<double>(per_thread * n_threads * sizeof(uint64_t)) / seconds);
  }
  // Keep the sums observable so the reads cannot be optimized away.
  volatile uint64_t sink = 0;
  for (uint64_t s : sums) sink = sink + s;
  return best;
}

}  // namespace baton::bench
