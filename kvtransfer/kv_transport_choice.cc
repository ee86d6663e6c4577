// The choice of transport (--kv-transport): its parsing, the transport it makes, and
// CreateAutoKvTransport, which picks per destination the preferred transport (links) when it
// can be had and the fallback (gRPC) otherwise, remembering a destination's refusal a while.
#include <chrono>
#include <memory>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "base/log.h"
#include "kvtransfer/kv_transport.h"

namespace baton::kvtransfer {
namespace {

class AutoKvTransport final : public KvTransport {
 public:
  AutoKvTransport(std::unique_ptr<KvTransport> preferred, std::unique_ptr<KvTransport> fallback,
                  const AutoKvTransportOptions& options)
      : preferred_(std::move(preferred)), fallback_(std::move(fallback)), options_(options) {}

  std::string_view name() const override { return "auto"; }

  absl::StatusOr<std::unique_ptr<KvPush>> StartPush(
      const std::string& destination, const KvPushSpec& spec,
      std::chrono::system_clock::time_point deadline) override {
    if (PreferredRefused(destination)) return fallback_->StartPush(destination, spec, deadline);
    absl::StatusOr<std::unique_ptr<KvPush>> push =
        preferred_->StartPush(destination, spec, deadline);
    if (push.ok() || absl::IsInvalidArgument(push.status())) return push;
    if (absl::IsUnavailable(push.status())) {  // not yet (a link opening): this push only
      return fallback_->StartPush(destination, spec, deadline);
    }
    BATON_LOG(WARNING) << "KV to " << destination << " goes over " << fallback_->name()
                       << " for the next " << options_.recheck_after.count() << " ms: "
                       << push.status().message();
    {
      absl::MutexLock lock(&mu_);
      refused_until_[destination] = std::chrono::steady_clock::now() + options_.recheck_after;
    }
    return fallback_->StartPush(destination, spec, deadline);
  }

 private:
  bool PreferredRefused(const std::string& destination) {
    absl::MutexLock lock(&mu_);
    auto it = refused_until_.find(destination);
    if (it == refused_until_.end()) return false;
    if (std::chrono::steady_clock::now() < it->second) return true;
    refused_until_.erase(it);
    return false;
  }

  const std::unique_ptr<KvTransport> preferred_;
  const std::unique_ptr<KvTransport> fallback_;
  const AutoKvTransportOptions options_;
  absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::chrono::steady_clock::time_point> refused_until_
      ABSL_GUARDED_BY(mu_);
};

}  // namespace

absl::StatusOr<KvTransportChoice> ParseKvTransportChoice(std::string_view name) {
  if (name == "auto") return KvTransportChoice::kAuto;
  if (name == "grpc") return KvTransportChoice::kGrpc;
  if (name == "nccl") return KvTransportChoice::kNccl;
  return absl::InvalidArgumentError(
      absl::StrCat("KV transport '", std::string(name), "' is not one of auto, grpc, nccl"));
}

class ColocatedKvTransport final : public KvTransport {
 public:
  ColocatedKvTransport(std::unique_ptr<KvTransport> self, std::unique_ptr<KvTransport> peers,
                       std::function<bool(const std::string&)> is_self)
      : self_(std::move(self)), peers_(std::move(peers)), is_self_(std::move(is_self)) {}

  std::string_view name() const override { return peers_->name(); }

  absl::StatusOr<std::unique_ptr<KvPush>> StartPush(
      const std::string& destination, const KvPushSpec& spec,
      std::chrono::system_clock::time_point deadline) override {
    KvTransport& transport = is_self_(destination) ? *self_ : *peers_;
    return transport.StartPush(destination, spec, deadline);
  }

 private:
  const std::unique_ptr<KvTransport> self_;
  const std::unique_ptr<KvTransport> peers_;
  const std::function<bool(const std::string&)> is_self_;
};

std::unique_ptr<KvTransport> CreateColocatedKvTransport(
    std::unique_ptr<KvTransport> self, std::unique_ptr<KvTransport> peers,
    std::function<bool(const std::string& destination)> is_self) {
  return std::make_unique<ColocatedKvTransport>(std::move(self), std::move(peers),
                                                std::move(is_self));
}

std::unique_ptr<KvTransport> CreateAutoKvTransport(std::unique_ptr<KvTransport> preferred,
                                                   std::unique_ptr<KvTransport> fallback,
                                                   const AutoKvTransportOptions& options) {
  return std::make_unique<AutoKvTransport>(std::move(preferred), std::move(fallback), options);
}

absl::StatusOr<std::unique_ptr<KvTransport>> CreateChosenKvTransport(
    KvTransportChoice choice, const GrpcKvTransportOptions& grpc_options, LinkFactory* links,
    const absl::Status& no_links) {
  std::unique_ptr<KvTransport> grpc = CreateGrpcKvTransport(grpc_options);
  if (choice == KvTransportChoice::kGrpc) return grpc;
  if (links == nullptr) {
    if (choice == KvTransportChoice::kNccl) {
      return absl::FailedPreconditionError(
          absl::StrCat("KV transport nccl: ", no_links.message()));
    }
    return grpc;
  }
  if (choice == KvTransportChoice::kNccl) {
    return CreateLinkKvTransport(links, {.client = grpc_options.client});
  }
  // Auto: the first pushes to a decode worker go over gRPC while its link opens.
  return CreateAutoKvTransport(
      CreateLinkKvTransport(links, {.client = grpc_options.client, .open_in_background = true}),
      std::move(grpc));
}

}  // namespace baton::kvtransfer
