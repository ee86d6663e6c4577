#include "worker/router_links.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>

#include <algorithm>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/time.h"
#include "base/log.h"
#include "baton/v1/router.grpc.pb.h"

namespace baton::worker {
namespace {

// "ip:port" / "[ip6]:port" of a resolved address.
std::string AddressText(const sockaddr* a, int port) {
  char text[INET6_ADDRSTRLEN] = {};
  if (a->sa_family == AF_INET6) {
    inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(a)->sin6_addr, text, sizeof(text));
    return absl::StrCat("[", text, "]:", port);
  }
  inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(a)->sin_addr, text, sizeof(text));
  return absl::StrCat(text, ":", port);
}

// Whether `a` is HOST:PORT with a port in [1, 65535]; its parts into `host` and `port`.
bool SplitHostPort(absl::string_view a, absl::string_view* host, int* port) {
  const size_t colon = a.rfind(':');
  if (colon == absl::string_view::npos || colon == 0 ||
      !absl::SimpleAtoi(a.substr(colon + 1), port) || *port <= 0 || *port > 65535) {
    return false;
  }
  *host = a.substr(0, colon);
  return true;
}

}  // namespace

absl::StatusOr<std::vector<std::string>> ResolveRouters(const std::string& spec) {
  absl::string_view rest = spec;
  if (!absl::ConsumePrefix(&rest, "dns:")) {
    std::vector<std::string> list;
    for (absl::string_view a : absl::StrSplit(spec, ',', absl::SkipWhitespace())) {
      a = absl::StripAsciiWhitespace(a);
      absl::string_view host;
      int port = 0;
      if (!SplitHostPort(a, &host, &port)) {
        return absl::InvalidArgumentError(
            absl::StrCat("--router '", spec, "': '", a, "' is not HOST:PORT"));
      }
      if (std::find(list.begin(), list.end(), a) == list.end()) list.emplace_back(a);
    }
    if (list.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("--router '", spec, "' names no router"));
    }
    return list;
  }
  absl::string_view host;
  int port = 0;
  if (!SplitHostPort(rest, &host, &port)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--router '", spec, "': a dns: spec is dns:NAME:PORT"));
  }
  const std::string name(host);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (const int e = getaddrinfo(name.c_str(), nullptr, &hints, &found); e != 0) {
    return absl::UnavailableError(
        absl::StrCat("--router '", spec, "': ", name, " does not resolve: ", gai_strerror(e)));
  }
  std::vector<std::string> addresses;
  for (const addrinfo* a = found; a != nullptr; a = a->ai_next) {
    std::string text = AddressText(a->ai_addr, port);
    if (std::find(addresses.begin(), addresses.end(), text) == addresses.end()) {
      addresses.push_back(std::move(text));
    }
  }
  freeaddrinfo(found);
  std::sort(addresses.begin(), addresses.end());
  return addresses;
}

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

RouterLinks::RouterLinks(RouterLinkOptions options) : options_(std::move(options)) {}

absl::StatusOr<std::unique_ptr<RouterLinks>> RouterLinks::Start(RouterLinkOptions options) {
  absl::StatusOr<std::vector<std::string>> addresses = ResolveRouters(options.routers);
  if (!addresses.ok() && addresses.status().code() == absl::StatusCode::kInvalidArgument) {
    return addresses.status();
  }
  std::unique_ptr<RouterLinks> links(new RouterLinks(std::move(options)));
  if (addresses.ok()) links->Update(*addresses);
  if (absl::StartsWith(links->options_.routers, "dns:")) {
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
    absl::StatusOr<std::vector<std::string>> addresses = ResolveRouters(options_.routers);
    // A name that stops resolving for a moment keeps the routers it had.
    if (addresses.ok()) Update(*addresses);
  }
}

}  // namespace baton::worker
