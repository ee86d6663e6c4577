#include "router/static_worker_poller.h"

#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "baton/v1/worker.grpc.pb.h"
#include "rpc/status.h"

namespace baton::router {
namespace {

// One Status call in flight; deleted by its completion callback.
struct StatusCall {
  grpc::ClientContext context;
  v1::StatusRequest request;
  v1::StatusResponse response;
  std::unique_ptr<v1::PrefillWorker::Stub> prefill_stub;
  std::unique_ptr<v1::DecodeWorker::Stub> decode_stub;
};

}  // namespace

StaticWorkerPoller::StaticWorkerPoller(WorkerRegistry* registry, WorkerChannels* channels)
    : registry_(registry), channels_(channels) {}

StaticWorkerPoller::~StaticWorkerPoller() { Stop(); }

void StaticWorkerPoller::Start(absl::Duration timeout) {
  PollRound();
  {
    absl::MutexLock lock(&mu_);
    auto answered = [this]() { return in_flight_.empty(); };
    mu_.AwaitWithTimeout(absl::Condition(&answered), timeout);
  }
  thread_ = std::thread([this] { Loop(); });
}

void StaticWorkerPoller::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (thread_.joinable()) thread_.join();
  // Calls in flight end by their deadline at the latest.
  absl::MutexLock lock(&mu_);
  auto idle = [this]() { return in_flight_.empty(); };
  mu_.Await(absl::Condition(&idle));
}

void StaticWorkerPoller::Loop() {
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      auto stopping = [this]() { return stopping_; };
      if (mu_.AwaitWithTimeout(absl::Condition(&stopping), registry_->heartbeat_interval())) {
        return;
      }
    }
    PollRound();
  }
}

void StaticWorkerPoller::PollRound() {
  for (const WorkerSnapshot& worker : registry_->StaticWorkers()) {
    {
      absl::MutexLock lock(&mu_);
      if (stopping_ || !in_flight_.insert(worker.id).second) continue;
    }
    absl::StatusOr<std::shared_ptr<grpc::Channel>> channel = channels_->Get(worker.address);
    if (!channel.ok()) {
      registry_->ReportStaticFailure(worker.id, channel.status());
      absl::MutexLock lock(&mu_);
      in_flight_.erase(worker.id);
      continue;
    }
    auto* call = new StatusCall;
    rpc::PrepareContext(call->context, channels_->options(),
                        absl::ToChronoTime(absl::Now() + registry_->heartbeat_timeout()));
    auto done = [this, call, id = worker.id, address = worker.address](grpc::Status status) {
      if (status.ok()) {
        // A mismatch is recorded in the registry (the worker stays unhealthy, last_error says why).
        registry_->ReportStatic(id, call->response.role(), call->response.model(),
                                call->response.load())
            .IgnoreError();
      } else {
        registry_->ReportStaticFailure(
            id, absl::UnavailableError(absl::StrCat("worker ", address, " did not answer Status: ",
                                                    status.error_message())));
      }
      delete call;
      absl::MutexLock lock(&mu_);
      in_flight_.erase(id);
    };
    if (ServesDecode(worker.role)) {
      call->decode_stub = v1::DecodeWorker::NewStub(*channel);
      call->decode_stub->async()->Status(&call->context, &call->request, &call->response,
                                         std::move(done));
    } else {
      call->prefill_stub = v1::PrefillWorker::NewStub(*channel);
      call->prefill_stub->async()->Status(&call->context, &call->request, &call->response,
                                          std::move(done));
    }
  }
}

}  // namespace baton::router
