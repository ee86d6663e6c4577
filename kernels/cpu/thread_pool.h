// A persistent pool of worker threads for the CPU kernels: n_threads - 1 workers plus the calling
// thread, which always takes part. ParallelFor splits [0, n_tasks) statically into R contiguous,
// near-equal ranges (range r is [n_tasks * r / R, n_tasks * (r + 1) / R)), a few per thread
// (kRangesPerThread); thread t owns a contiguous block of them and runs it in order, then takes
// any range not yet started, from the end. So the threads finish together even when one runs
// slower (a shared core, a descheduled worker), and ParallelFor returns once every range is
// done, not once every worker has woken up. Kernels must therefore compute each task the same way
// whichever thread runs it, in whatever range (ours do: the arithmetic of one output never
// depends on the range it falls in).
//
// Workers wait for work by spinning briefly (cheap hand-off between the back-to-back kernels of a
// forward pass) and then sleeping on a futex (std::atomic::wait), so an idle pool costs no CPU.
//
// Thread-safety: one thread at a time may call ParallelFor (a Backend owns its pool and is itself
// single-threaded). `fn` runs concurrently on up to n_threads threads and must not call
// ParallelFor on the same pool (that would deadlock; it is a CHECK failure). The destructor joins
// the workers and must not run concurrently with ParallelFor.
#ifndef BATON_KERNELS_CPU_THREAD_POOL_H_
#define BATON_KERNELS_CPU_THREAD_POOL_H_

#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

#include "absl/functional/function_ref.h"

namespace baton::kernels {

struct ThreadPoolOptions {
  int n_threads = 0;  // threads including the caller; 0: the CPUs of the process's affinity mask
  // Pin worker i (1..n_threads-1) to the i-th CPU of the affinity mask (modulo its size). The
  // calling thread (thread 0) is never re-pinned.
  bool pin_threads = false;
  // How long a waiting thread busy-waits (pause instructions) before it sleeps: long enough to
  // bridge the gaps between the kernels of a forward pass, short enough not to burn a core when
  // the pool is idle. 0: sleep at once.
  int spin_microseconds = 100;
};

class ThreadPool {
 public:
  // Ranges per thread in a job: enough that a thread running late hands over part of its share,
  // few enough that a range's fixed costs stay small.
  static constexpr int kRangesPerThread = 4;

  explicit ThreadPool(const ThreadPoolOptions& options = {});
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  // Threads that ParallelFor uses, the caller included (>= 1).
  int n_threads() const { return n_threads_; }

  // Calls fn(begin, end, thread) once for each range of the static split of [0, n_tasks) into
  // R = min(n_tasks, kRangesPerThread * n_threads()) ranges (all non-empty); `thread`
  // (0..n_threads()-1) is the thread running the call, unique among concurrent calls, so it can
  // index per-thread scratch. The caller is thread 0. Returns after every call has returned;
  // their writes are visible to the caller. n_tasks <= 0 does nothing.
  void ParallelFor(int64_t n_tasks,
                   absl::FunctionRef<void(int64_t begin, int64_t end, int thread)> fn);

  // The CPUs of the calling process's affinity mask, in increasing order.
  static std::vector<int> AffinityCpus();

 private:
  using Fn = absl::FunctionRef<void(int64_t, int64_t, int)>;

  // One slot per range, on its own cache line: the generation of the last job whose range
  // `index` was claimed (by its owner or by a thread that took it over).
  struct alignas(64) RangeSlot {
    std::atomic<uint32_t> claimed{0};
  };

  void WorkerLoop(int index, int cpu);
  // Thread `thread`'s part of job `generation`: its own ranges, then any left.
  void RunJob(int thread, uint32_t generation);
  // Claims range `range` of job `generation` and runs it on thread `thread`; false if it was
  // already claimed (or the job is over).
  bool TryRun(int range, uint32_t generation, int thread);

  const int n_threads_;
  const int64_t spin_ns_;
  std::vector<std::thread> workers_;
  std::vector<RangeSlot> slots_;  // [n_threads_ * kRangesPerThread]

  // The current job; written by the caller before it publishes a new generation. A thread reads
  // it only after claiming one of its ranges, which proves the job is still running.
  const Fn* job_fn_ = nullptr;
  int64_t job_n_tasks_ = 0;
  // Also read before a claim (RunJob), where it may already be the next job's: atomic.
  std::atomic<int> job_n_ranges_{0};

  alignas(64) std::atomic<uint32_t> generation_{0};  // bumped once per job (and on shutdown)
  alignas(64) std::atomic<int32_t> pending_{0};      // ranges of the current job not yet done
  alignas(64) std::atomic<bool> busy_{false};        // a ParallelFor is running (misuse check)
  std::atomic<bool> stop_{false};
};

}  // namespace baton::kernels

#endif  // BATON_KERNELS_CPU_THREAD_POOL_H_
