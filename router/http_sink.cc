#include "router/http_sink.h"

#include <iterator>
#include <utility>

namespace baton::router {

bool HttpSink::Send(v1::GenerateResponse response) {
  absl::MutexLock lock(&mu_);
  auto room = [this]() {
    return abandoned_ || queue_.size() < kMaxQueued;
  };
  mu_.Await(absl::Condition(&room));
  if (abandoned_) return false;
  queue_.push_back(std::move(response));
  SignalLocked();
  return true;
}

void HttpSink::Close(const absl::Status& status) {
  absl::MutexLock lock(&mu_);
  closed_ = true;
  status_ = status;
  SignalLocked();
}

HttpSink::Taken HttpSink::Take() {
  Taken taken;
  absl::MutexLock lock(&mu_);
  taken.messages.assign(std::make_move_iterator(queue_.begin()),
                        std::make_move_iterator(queue_.end()));
  queue_.clear();
  taken.closed = closed_;
  taken.status = status_;
  signalled_ = false;
  return taken;
}

void HttpSink::SignalLocked() {
  if (signalled_ || on_ready_ == nullptr) return;
  signalled_ = true;
  on_ready_();
}

void HttpSink::Detach() {
  absl::AnyInvocable<void()> on_ready;
  {
    absl::MutexLock lock(&mu_);
    on_ready = std::move(on_ready_);
    on_ready_ = nullptr;
  }
  // Destroyed outside the lock: it may hold the last reference to what it posts to.
}

void HttpSink::Abandon() {
  {
    absl::MutexLock lock(&mu_);
    if (abandoned_) return;
    abandoned_ = true;
    queue_.clear();
  }
  if (driver_ != nullptr) driver_->Cancel();
}

void HttpSink::Cancel() {
  if (driver_ != nullptr) driver_->Cancel();
}

}  // namespace baton::router
