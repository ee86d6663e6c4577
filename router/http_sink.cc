#include "router/http_sink.h"

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
  return true;
}

void HttpSink::Close(const absl::Status& status) {
  absl::MutexLock lock(&mu_);
  closed_ = true;
  status_ = status;
}

HttpSink::Event HttpSink::Next(absl::Time deadline) {
  Event event;
  absl::MutexLock lock(&mu_);
  auto ready = [this]() { return !queue_.empty() || closed_; };
  if (!mu_.AwaitWithDeadline(absl::Condition(&ready), deadline)) return event;
  if (!queue_.empty()) {
    event.kind = Event::Kind::kMessage;
    event.message = std::move(queue_.front());
    queue_.pop_front();
    return event;
  }
  event.kind = Event::Kind::kClosed;
  event.status = status_;
  return event;
}

bool HttpSink::WaitForEvent(absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  auto ready = [this]() { return !queue_.empty() || closed_; };
  return mu_.AwaitWithDeadline(absl::Condition(&ready), deadline);
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
