#include "router/worker_channels.h"

namespace baton::router {

absl::StatusOr<std::shared_ptr<grpc::Channel>> WorkerChannels::Get(const std::string& address) {
  absl::MutexLock lock(&mu_);
  auto it = channels_.find(address);
  if (it != channels_.end()) return it->second;
  absl::StatusOr<std::shared_ptr<grpc::Channel>> channel = rpc::MakeChannel(address, options_);
  if (!channel.ok()) return channel.status();
  channels_.emplace(address, *channel);
  return *channel;
}

}  // namespace baton::router
