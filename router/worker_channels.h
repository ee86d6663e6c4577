// Channels from the router to its workers: one per address, made on first use and kept (gRPC
// reconnects them by itself when a worker restarts), all with the same client options.
//
// Thread-safety: thread-safe.
#ifndef BATON_ROUTER_WORKER_CHANNELS_H_
#define BATON_ROUTER_WORKER_CHANNELS_H_

#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "grpcpp/grpcpp.h"
#include "rpc/server_options.h"

namespace baton::router {

class WorkerChannels {
 public:
  explicit WorkerChannels(rpc::ClientOptions options) : options_(std::move(options)) {}
  WorkerChannels(const WorkerChannels&) = delete;
  WorkerChannels& operator=(const WorkerChannels&) = delete;

  // The channel to `address` (host:port); an error only when the TLS files cannot be read.
  absl::StatusOr<std::shared_ptr<grpc::Channel>> Get(const std::string& address);

  // The client options (token, TLS); calls go through rpc::PrepareContext with them.
  const rpc::ClientOptions& options() const { return options_; }

 private:
  const rpc::ClientOptions options_;
  absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::shared_ptr<grpc::Channel>> channels_ ABSL_GUARDED_BY(mu_);
};

}  // namespace baton::router

#endif  // BATON_ROUTER_WORKER_CHANNELS_H_
