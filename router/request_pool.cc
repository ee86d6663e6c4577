#include "router/request_pool.h"

#include <algorithm>
#include <utility>

namespace baton::router {

RequestPool::RequestPool(int max_threads) : max_threads_(std::max(1, max_threads)) {}

RequestPool::~RequestPool() { Stop(); }

bool RequestPool::Submit(absl::AnyInvocable<void() &&> task) {
  absl::MutexLock lock(&mu_);
  if (stopping_) return false;
  tasks_.push_back(std::move(task));
  // Idle threads will take the queued tasks; start one more only when they do not suffice.
  if (static_cast<int>(tasks_.size()) > idle_ &&
      static_cast<int>(threads_.size()) < max_threads_) {
    threads_.emplace_back([this] { Loop(); });
  }
  return true;
}

bool RequestPool::Saturated() {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(tasks_.size()) >= idle_ &&
         static_cast<int>(threads_.size()) >= max_threads_;
}

void RequestPool::Stop() {
  std::vector<std::thread> threads;
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    threads.swap(threads_);
  }
  for (std::thread& t : threads) t.join();
}

void RequestPool::Loop() {
  while (true) {
    absl::AnyInvocable<void() &&> task;
    {
      absl::MutexLock lock(&mu_);
      ++idle_;
      auto ready = [this]() {
        return !tasks_.empty() || stopping_;
      };
      mu_.Await(absl::Condition(&ready));
      --idle_;
      if (tasks_.empty()) return;  // stopping, nothing left to run
      task = std::move(tasks_.front());
      tasks_.pop_front();
    }
    std::move(task)();
  }
}

}  // namespace baton::router
