#include "engine/engine_loop.h"

#include "absl/time/time.h"

namespace baton::engine {

EngineLoop::EngineLoop(std::vector<Step> steps, std::chrono::milliseconds tick)
    : steps_(std::move(steps)), tick_(tick) {}

EngineLoop::~EngineLoop() { Stop(); }

void EngineLoop::Start() { thread_ = std::thread([this] { Run(); }); }

void EngineLoop::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

void EngineLoop::Wake() {
  absl::MutexLock lock(&mu_);
  woken_ = true;
}

void EngineLoop::Run() {
  while (true) {
    bool worked = false;
    for (const Step& step : steps_) worked |= step();
    absl::MutexLock lock(&mu_);
    if (stopping_) return;
    if (!worked) {
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return woken_ || stopping_; };
      mu_.AwaitWithTimeout(absl::Condition(&ready), absl::FromChrono(tick_));
    }
    woken_ = false;
  }
}

}  // namespace baton::engine
