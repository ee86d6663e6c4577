#include "kernels/cpu/thread_pool.h"

#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <cstdio>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>
#include <vector>

#include "absl/log/check.h"

namespace baton::kernels {
namespace {

inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield" ::: "memory");
#endif
}

// Waits until `a` differs from `old` (spinning for up to spin_ns first, then sleeping) and
// returns its new value.
template <typename T>
T WaitForChange(const std::atomic<T>& a, T old, int64_t spin_ns) {
  if (spin_ns > 0) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::nanoseconds(spin_ns);
    for (int i = 1;; ++i) {
      const T v = a.load(std::memory_order_acquire);
      if (v != old) return v;
      CpuRelax();
      if (i % 64 == 0 && std::chrono::steady_clock::now() >= deadline) break;
    }
  }
  for (;;) {
    a.wait(old, std::memory_order_acquire);
    const T v = a.load(std::memory_order_acquire);
    if (v != old) return v;
  }
}

int ResolveThreadCount(int requested) {
  if (requested > 0) return requested;
  const int n = static_cast<int>(ThreadPool::AffinityCpus().size());
  return std::max(1, n);
}

}  // namespace

std::vector<int> ThreadPool::AffinityCpus() {
  std::vector<int> cpus;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) {
    for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
      if (CPU_ISSET(cpu, &set)) cpus.push_back(cpu);
    }
  }
  if (cpus.empty()) {
    const unsigned hw = std::thread::hardware_concurrency();
    for (unsigned cpu = 0; cpu < std::max(1u, hw); ++cpu) cpus.push_back(static_cast<int>(cpu));
  }
  return cpus;
}

ThreadPool::ThreadPool(const ThreadPoolOptions& options)
    : n_threads_(ResolveThreadCount(options.n_threads)),
      spin_ns_(std::max<int64_t>(0, options.spin_microseconds) * 1000),
      slots_(static_cast<size_t>(n_threads_) * kRangesPerThread) {
  std::vector<int> cpus;
  if (options.pin_threads) cpus = AffinityCpus();
  workers_.reserve(n_threads_ - 1);
  for (int i = 1; i < n_threads_; ++i) {
    const int cpu = cpus.empty() ? -1 : cpus[i % cpus.size()];
    workers_.emplace_back([this, i, cpu] { WorkerLoop(i, cpu); });
  }
}

ThreadPool::~ThreadPool() {
  stop_.store(true, std::memory_order_relaxed);
  generation_.fetch_add(1, std::memory_order_release);
  generation_.notify_all();
  for (std::thread& t : workers_) t.join();
}

bool ThreadPool::TryRun(int range, uint32_t generation, int thread) {
  std::atomic<uint32_t>& claimed = slots_[range].claimed;
  uint32_t last = claimed.load(std::memory_order_relaxed);
  // Generations only grow (wrapping after 2^32 jobs: compare by difference).
  while (static_cast<int32_t>(generation - last) > 0) {
    if (claimed.compare_exchange_weak(last, generation, std::memory_order_acquire,
                                      std::memory_order_relaxed)) {
      // The range was unclaimed, so job `generation` is still running and its fields are stable
      // (they were published before the generation, which this thread acquired).
      const int64_t n = job_n_tasks_;
      const int64_t r = job_n_ranges_.load(std::memory_order_relaxed);
      (*job_fn_)(n * range / r, n * (range + 1) / r, thread);
      if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) pending_.notify_one();
      return true;
    }
  }
  return false;
}

void ThreadPool::RunJob(int thread, uint32_t generation) {
  const int r = job_n_ranges_.load(std::memory_order_relaxed);
  const int t = n_threads_;
  // Its own ranges in order, then the others' from the end, the other way from their owners.
  for (int range = r * thread / t; range < r * (thread + 1) / t; ++range) {
    TryRun(range, generation, thread);
  }
  for (int range = r - 1; range >= 0; --range) TryRun(range, generation, thread);
}

void ThreadPool::WorkerLoop(int index, int cpu) {
  if (cpu >= 0) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    if (pthread_setaffinity_np(pthread_self(), sizeof set, &set) != 0) {
      std::fprintf(stderr, "ThreadPool: could not pin worker %d to CPU %d\n", index, cpu);
    }
  }
  uint32_t seen = 0;
  for (;;) {
    seen = WaitForChange(generation_, seen, spin_ns_);
    if (stop_.load(std::memory_order_relaxed)) return;
    RunJob(index, seen);
  }
}

void ThreadPool::ParallelFor(int64_t n_tasks, Fn fn) {
  if (n_tasks <= 0) return;
  if (n_threads_ == 1 || n_tasks == 1) {
    fn(0, n_tasks, 0);
    return;
  }
  CHECK(!busy_.exchange(true, std::memory_order_acquire))
      << "ThreadPool::ParallelFor called concurrently or from inside a task";
  const uint32_t generation = generation_.load(std::memory_order_relaxed) + 1;
  const int n_ranges =
      static_cast<int>(std::min<int64_t>(n_tasks, int64_t{n_threads_} * kRangesPerThread));
  job_fn_ = &fn;
  job_n_tasks_ = n_tasks;
  job_n_ranges_.store(n_ranges, std::memory_order_relaxed);
  // Ranges beyond n_ranges do not exist in this job: mark them taken.
  for (size_t i = n_ranges; i < slots_.size(); ++i) {
    slots_[i].claimed.store(generation, std::memory_order_relaxed);
  }
  pending_.store(n_ranges, std::memory_order_relaxed);
  generation_.store(generation, std::memory_order_release);  // publishes the job fields above
  generation_.notify_all();

  RunJob(0, generation);

  int32_t left = pending_.load(std::memory_order_acquire);
  while (left != 0) left = WaitForChange(pending_, left, spin_ns_);
  job_fn_ = nullptr;
  busy_.store(false, std::memory_order_release);
}

}  // namespace baton::kernels
