#include "worker/router_links.h"

#include <algorithm>
#include <utility>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "base/log.h"
#include "baton/v1/router.grpc.pb.h"

namespace baton::worker {

// One router's registration and heartbeats, on its own thread until destroyed.
class RouterLinks::Link {
 public:
  Link(const RouterLinkOptions& options, std::string address)
      : options_(options), address_(std::move(address)), thread_([this] { Loop(); }) {}
  ~Link() {
    stop_.Notify();
    thread_.join();
  }

 private:
  void Loop() {
    absl::StatusOr<std::shared_ptr<grpc::Channel>> channel =
        rpc::MakeChannel(address_, options_.client);
    if (!channel.ok()) {
      BATON_LOG(ERROR) << "cannot reach router " << address_ << ": " << channel.status().message();
      return;
    }
    std::unique_ptr<baton::v1::Router::Stub> stub = baton::v1::Router::NewStub(*channel);
    std::string worker_id;
    std::chrono::milliseconds interval = options_.heartbeat_interval;
    while (!stop_.WaitForNotificationWithTimeout(
        absl::FromChrono(worker_id.empty() ? std::chrono::milliseconds(100) : interval))) {
      grpc::ClientContext context;
      rpc::PrepareContext(context, options_.client,
                          std::chrono::system_clock::now() + interval * 4);
      if (worker_id.empty()) {
        baton::v1::RegisterWorkerRequest request = options_.registration;
        request.set_role(options_.role());
        *request.mutable_load() = options_.load();
        baton::v1::RegisterWorkerResponse response;
        grpc::Status status = stub->RegisterWorker(&context, request, &response);
        if (status.ok()) {
          worker_id = response.worker_id();
          if (response.heartbeat_interval_ms() > 0) {
            interval = std::chrono::milliseconds(response.heartbeat_interval_ms());
          }
        } else if (status.error_code() != grpc::StatusCode::UNAVAILABLE &&
                   status.error_code() != grpc::StatusCode::DEADLINE_EXCEEDED) {
          BATON_LOG(ERROR) << "router " << address_
                           << " refused registration: " << status.error_message();
        }
      } else {
        baton::v1::HeartbeatRequest request;
        request.set_worker_id(worker_id);
        request.set_role(options_.role());
        *request.mutable_load() = options_.load();
        baton::v1::HeartbeatResponse response;
        grpc::Status status = stub->Heartbeat(&context, request, &response);
        if (status.ok() && !response.known()) worker_id.clear();  // it restarted: register again
      }
    }
  }

  const RouterLinkOptions& options_;
  const std::string address_;
  absl::Notification stop_;
  std::thread thread_;  // last: starts once the rest is built
};

RouterLinks::RouterLinks(RouterLinkOptions options, rpc::AddressSpec spec)
    : options_(std::move(options)), spec_(std::move(spec)) {}

absl::StatusOr<std::unique_ptr<RouterLinks>> RouterLinks::Start(RouterLinkOptions options) {
  absl::StatusOr<rpc::AddressSpec> spec = rpc::ParseAddressSpec("--router", options.routers);
  if (!spec.ok()) return spec.status();
  std::unique_ptr<RouterLinks> links(new RouterLinks(std::move(options), std::move(*spec)));
  absl::StatusOr<std::vector<std::string>> addresses =
      rpc::ResolveAddresses("--router", links->spec_);
  if (addresses.ok()) links->Update(*addresses);
  if (links->spec_.is_dynamic()) {
    links->resolver_ = std::thread([self = links.get()] { self->ResolveLoop(); });
  }
  return links;
}

RouterLinks::~RouterLinks() {
  stop_.Notify();
  if (resolver_.joinable()) resolver_.join();
  absl::flat_hash_map<std::string, std::unique_ptr<Link>> links;
  {
    absl::MutexLock lock(&mu_);
    links.swap(links_);
  }
  links.clear();  // each joins its thread
}

std::vector<std::string> RouterLinks::addresses() const {
  absl::MutexLock lock(&mu_);
  std::vector<std::string> out;
  for (const auto& [address, link] : links_) out.push_back(address);
  std::sort(out.begin(), out.end());
  return out;
}

void RouterLinks::Update(const std::vector<std::string>& addresses) {
  std::vector<std::unique_ptr<Link>> gone;
  {
    absl::MutexLock lock(&mu_);
    for (auto it = links_.begin(); it != links_.end();) {
      if (std::find(addresses.begin(), addresses.end(), it->first) == addresses.end()) {
        BATON_LOG(INFO) << "router " << it->first << " left " << options_.routers;
        gone.push_back(std::move(it->second));
        links_.erase(it++);
      } else {
        ++it;
      }
    }
    for (const std::string& address : addresses) {
      if (!links_.contains(address)) links_[address] = std::make_unique<Link>(options_, address);
    }
  }
  gone.clear();  // joined outside the lock
}

void RouterLinks::ResolveLoop() {
  while (!stop_.WaitForNotificationWithTimeout(absl::FromChrono(options_.resolve_interval))) {
    absl::StatusOr<std::vector<std::string>> addresses = rpc::ResolveAddresses("--router", spec_);
    // A name that stops resolving for a moment keeps the routers it had.
    if (addresses.ok()) Update(*addresses);
  }
}

}  // namespace baton::worker
