// The thread that owns a worker's compute: it runs the worker's step functions (a prefill batch, a
// decode step) round-robin, and sleeps when none has work until Wake() or a short tick.
//
// Thread-safety: Start/Stop from one owner thread; Wake from any thread. The step functions run
// on the loop thread only, so state they alone touch needs no lock.
#ifndef BATON_ENGINE_ENGINE_LOOP_H_
#define BATON_ENGINE_ENGINE_LOOP_H_

#include <chrono>
#include <functional>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace baton::engine {

class EngineLoop {
 public:
  // Does one unit of work if there is any; returns whether it did.
  using Step = std::function<bool()>;

  // `tick`: how long the loop sleeps at most when idle (steps also use it for timers such as
  // lease expiry).
  explicit EngineLoop(std::vector<Step> steps,
                      std::chrono::milliseconds tick = std::chrono::milliseconds(20));
  ~EngineLoop();  // Stop()s

  void Start();
  // Finishes the step in progress and joins the thread.
  void Stop();
  // New work arrived: run the steps now.
  void Wake();

 private:
  void Run();

  const std::vector<Step> steps_;
  const std::chrono::milliseconds tick_;
  absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool woken_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace baton::engine

#endif  // BATON_ENGINE_ENGINE_LOOP_H_
