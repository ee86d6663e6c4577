#include "kvtransfer/link_acceptor.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace baton::kvtransfer {
namespace {

// The largest bootstrap accepted: an NCCL unique id is 128 bytes.
constexpr size_t kMaxBootstrapBytes = 4096;

}  // namespace

LinkAcceptor::LinkAcceptor(LinkFactory* factory, int32_t max_links, absl::Duration idle_timeout)
    : factory_(*factory), max_links_(max_links), idle_timeout_(idle_timeout) {}

absl::Status LinkAcceptor::Open(const v1::OpenKvLinkRequest& request, absl::Time deadline) {
  if (absl::Status bad = ValidateLinkId(request.link_id()); !bad.ok()) return bad;
  if (request.kind() != factory_.kind()) {
    return absl::UnimplementedError(absl::StrCat("this worker takes links of kind '",
                                                 std::string(factory_.kind()), "' only, not '",
                                                 request.kind(), "'"));
  }
  if (request.bootstrap().size() > kMaxBootstrapBytes) {
    return absl::InvalidArgumentError(absl::StrCat("bootstrap of ", request.bootstrap().size(),
                                                   " bytes; at most ", kMaxBootstrapBytes));
  }
  absl::StatusOr<std::unique_ptr<LinkEndpoint>> endpoint = factory_.Accept(request.bootstrap());
  if (!endpoint.ok()) return endpoint.status();
  if (absl::Status connected = (*endpoint)->AwaitConnected(deadline); !connected.ok()) {
    return connected;  // the endpoint aborts as it goes
  }
  auto link = std::make_shared<LinkReceiver>(request.link_id(), *std::move(endpoint));
  std::shared_ptr<LinkReceiver> replaced;
  std::vector<std::shared_ptr<LinkReceiver>> evicted;
  {
    absl::MutexLock lock(&mu_);
    Entry& entry = links_[request.link_id()];
    replaced = std::move(entry.link);
    entry = {.link = std::move(link), .last_used = ++uses_, .last_used_at = absl::Now()};
    evicted = EvictLocked();
  }
  if (replaced != nullptr) replaced->Break(absl::AbortedError("a new link took its id"));
  for (const auto& link : evicted) link->Break(absl::ResourceExhaustedError("evicted"));
  return absl::OkStatus();
}

std::vector<std::shared_ptr<LinkReceiver>> LinkAcceptor::EvictLocked() {
  std::vector<std::shared_ptr<LinkReceiver>> evicted;
  const absl::Time idle_since = absl::Now() - idle_timeout_;
  for (auto it = links_.begin(); it != links_.end();) {
    if (it->second.link->broken() || it->second.last_used_at < idle_since) {
      evicted.push_back(std::move(it->second.link));
      links_.erase(it++);
    } else {
      ++it;
    }
  }
  while (static_cast<int32_t>(links_.size()) > max_links_) {
    auto oldest = links_.begin();
    for (auto it = links_.begin(); it != links_.end(); ++it) {
      if (it->second.last_used < oldest->second.last_used) oldest = it;
    }
    evicted.push_back(std::move(oldest->second.link));
    links_.erase(oldest);
  }
  return evicted;
}

absl::StatusOr<std::shared_ptr<LinkReceiver>> LinkAcceptor::Find(const std::string& link_id) {
  std::vector<std::shared_ptr<LinkReceiver>> evicted;
  absl::StatusOr<std::shared_ptr<LinkReceiver>> found;
  {
    absl::MutexLock lock(&mu_);
    evicted = EvictLocked();
    auto it = links_.find(link_id);
    if (it == links_.end()) {
      found = absl::FailedPreconditionError(absl::StrCat(
          "no link '", link_id, "' here (never opened, broken or evicted): open a new one"));
    } else {
      it->second.last_used = ++uses_;
      it->second.last_used_at = absl::Now();
      found = it->second.link;
    }
  }
  for (const auto& link : evicted) {
    link->Break(absl::ResourceExhaustedError("evicted: broken, idle, or too many links"));
  }
  return found;
}

size_t LinkAcceptor::size() const {
  absl::MutexLock lock(&mu_);
  size_t live = 0;
  for (const auto& [id, entry] : links_) live += !entry.link->broken();
  return live;
}

}  // namespace baton::kvtransfer
