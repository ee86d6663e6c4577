#include "router/worker_discovery.h"

#include <utility>

#include "base/log.h"

namespace baton::router {

WorkerDiscovery::WorkerDiscovery(WorkerRegistry* registry, WorkerDiscoveryOptions options)
    : registry_(registry),
      options_(std::move(options)),
      found_(options_.sources.size()),
      last_error_(options_.sources.size()) {}

WorkerDiscovery::~WorkerDiscovery() { Stop(); }

void WorkerDiscovery::Start() {
  ResolveOnce();
  thread_ = std::thread([this] {
    while (!stop_.WaitForNotificationWithTimeout(options_.interval)) ResolveOnce();
  });
}

void WorkerDiscovery::Stop() {
  if (!stop_.HasBeenNotified()) stop_.Notify();
  if (thread_.joinable()) thread_.join();
}

void WorkerDiscovery::ResolveOnce() {
  for (size_t i = 0; i < options_.sources.size(); ++i) {
    const WorkerSource& source = options_.sources[i];
    absl::StatusOr<std::vector<std::string>> addresses =
        options_.resolve ? options_.resolve(source)
                         : rpc::ResolveAddresses(source.flag, source.spec);
    if (!addresses.ok()) {
      if (last_error_[i] != addresses.status().message()) {
        last_error_[i] = std::string(addresses.status().message());
        BATON_LOG(WARNING) << "worker discovery: " << last_error_[i]
                           << "; keeping the workers found before";
      }
      continue;
    }
    last_error_[i].clear();
    std::map<std::string, std::string> now;
    for (const std::string& address : *addresses) {
      now[address] = registry_->AddStatic(source.role, address);
      if (!found_[i].contains(address)) {
        BATON_LOG(INFO) << "worker discovery: " << WorkerRoleName(source.role) << " worker "
                        << address << " found by " << source.flag << " " << source.spec.text;
      }
    }
    for (const auto& [address, id] : found_[i]) {
      if (now.contains(address)) continue;
      BATON_LOG(INFO) << "worker discovery: " << WorkerRoleName(source.role) << " worker "
                      << address << " left " << source.spec.text << ": draining";
      registry_->Drain(id);
    }
    found_[i] = std::move(now);
  }
}

}  // namespace baton::router
