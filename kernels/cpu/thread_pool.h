// A persistent pool of worker threads for the CPU kernels: n_threads - 1 workers plus the calling
// thread, which always takes part. ParallelFor splits [0, n_tasks) statically into T contiguous,
// near-equal ranges (range t is [n_tasks * t / T, n_tasks * (t + 1) / T)); thread t runs range t.
// A thread that has finished its range runs any range whose owner has not started yet, so a
// worker that the OS has descheduled (more runnable threads than cores) never holds up the
// caller: ParallelFor returns once every range is done, not once every worker has woken up.
// Kernels must therefore compute each task the same way whichever thread runs it (ours do: the
// arithmetic of one output never depends on the range it falls in).
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
  explicit ThreadPool(const ThreadPoolOptions& options = {});
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  // Threads that ParallelFor uses, the caller included (>= 1).
  int n_threads() const { return n_threads_; }

  // Calls fn(begin, end, range) once for each range of the static split of [0, n_tasks) into
  // T = min(n_tasks, n_threads()) ranges (all non-empty); `range` (0..T-1) is unique among
  // concurrent calls, so it can index per-call scratch. The caller runs range 0 (and any range
  // not yet started by its owner). Returns after every call has returned; their writes are
  // visible to the caller. n_tasks <= 0 does nothing.
  void ParallelFor(int64_t n_tasks,
                   absl::FunctionRef<void(int64_t begin, int64_t end, int range)> fn);

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
  // Claims range `index` of job `generation` and runs it; false if it was already claimed (or the
  // job is over).
  bool TryRun(int index, uint32_t generation);

  const int n_threads_;
  const int64_t spin_ns_;
  std::vector<std::thread> workers_;
  std::vector<RangeSlot> slots_;  // [n_threads_]

  // The current job; written by the caller before it publishes a new generation. A thread reads
  // it only after claiming one of its ranges, which proves the job is still running.
  const Fn* job_fn_ = nullptr;
  int64_t job_n_tasks_ = 0;
  int job_n_ranges_ = 0;

  alignas(64) std::atomic<uint32_t> generation_{0};  // bumped once per job (and on shutdown)
  alignas(64) std::atomic<int32_t> pending_{0};      // ranges of the current job not yet done
  alignas(64) std::atomic<bool> busy_{false};        // a ParallelFor is running (misuse check)
  std::atomic<bool> stop_{false};
};

}  // namespace baton::kernels

#endif  // BATON_KERNELS_CPU_THREAD_POOL_H_
