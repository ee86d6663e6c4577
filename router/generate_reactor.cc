#include "router/generate_reactor.h"

#include <chrono>
#include <utility>

#include "absl/random/random.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "router/request_admission.h"
#include "rpc/status.h"

namespace baton::router {
namespace {

std::string NewRequestId() {
  thread_local absl::BitGen gen;
  return absl::StrFormat("req-%016x", absl::Uniform<uint64_t>(gen));
}

}  // namespace

GenerateReactor::GenerateReactor(grpc::CallbackServerContext* context,
                                 const v1::GenerateRequest& request, const GenerateEnv& env)
    : env_(env) {
  Start(context, request);
}

void GenerateReactor::Start(grpc::CallbackServerContext* context,
                            const v1::GenerateRequest& request) {
  const absl::Time received = absl::Now();
  const std::string request_id =
      request.request_id().empty() ? NewRequestId() : request.request_id();
  // The client's deadline bounds the whole request; without one, the router's default does.
  const auto client_deadline = context->deadline();
  const bool has_deadline =
      client_deadline < std::chrono::system_clock::now() + std::chrono::hours(24 * 365);
  const absl::Time deadline =
      has_deadline ? absl::FromChrono(client_deadline) : received + env_.request_timeout;
  absl::StatusOr<std::shared_ptr<RequestDriver>> driver =
      CreateDriver(env_, request, request_id, received, deadline, this);
  if (!driver.ok()) {
    Finish(rpc::ToGrpcStatus(driver.status()));
    return;
  }
  driver_ = *std::move(driver);
  if (absl::Status launched = LaunchDriver(env_, driver_); !launched.ok()) {
    driver_.reset();
    Finish(rpc::ToGrpcStatus(launched));
  }
  // From here on the driver may run, Send, Close and so end the call: no member is touched again.
}

bool GenerateReactor::Send(v1::GenerateResponse response) {
  mu_.Lock();
  auto room = [this]() { return cancelled_ || queued_.size() < kMaxQueuedWrites; };
  mu_.Await(absl::Condition(&room));
  if (cancelled_) {
    mu_.Unlock();
    return false;
  }
  if (write_in_flight_) {
    queued_.push_back(std::move(response));
    mu_.Unlock();
    return true;
  }
  write_in_flight_ = true;
  writing_ = std::move(response);
  mu_.Unlock();
  // writing_ is left alone until OnWriteDone: only the holder of write_in_flight_ touches it.
  StartWrite(&writing_);
  return true;
}

void GenerateReactor::Close(const absl::Status& status) {
  const grpc::Status finish = rpc::ToGrpcStatus(status);
  mu_.Lock();
  if (write_in_flight_) {
    finish_ = finish;  // OnWriteDone finishes after the last queued write
    mu_.Unlock();
    return;
  }
  mu_.Unlock();
  Finish(finish);
}

void GenerateReactor::OnWriteDone(bool ok) {
  mu_.Lock();
  if (!ok) {
    // The stream is broken (client gone): drop what is queued and stop the request.
    cancelled_ = true;
    queued_.clear();
  }
  if (!queued_.empty()) {
    writing_ = std::move(queued_.front());
    queued_.pop_front();
    mu_.Unlock();
    StartWrite(&writing_);
    return;
  }
  write_in_flight_ = false;
  std::optional<grpc::Status> finish = std::move(finish_);
  finish_.reset();
  mu_.Unlock();
  if (!ok && driver_ != nullptr) driver_->Cancel();
  if (finish.has_value()) Finish(*finish);
}

void GenerateReactor::OnCancel() {
  {
    absl::MutexLock lock(&mu_);
    cancelled_ = true;
    queued_.clear();
  }
  if (driver_ != nullptr) driver_->Cancel();
}

void GenerateReactor::OnDone() { delete this; }

}  // namespace baton::router
