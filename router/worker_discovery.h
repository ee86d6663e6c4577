// Workers found where they run, besides registration: each source names a role and an address
// spec resolved again every interval (rpc/address_spec.h: "dns:NAME:PORT" follows a headless
// Service's ready pods through DNS, "k8s:SERVICE:PORT" a Service's ready endpoints through the
// Kubernetes API). An address that appears becomes a static worker of that role,
// polled with Status like one listed on the command line (StaticWorkerPoller); an address that
// leaves the resolution is drained (WorkerRegistry::Drain): it gets no new requests, the requests
// it runs finish on their own connections, and the registry forgets it once it is idle. A failed
// resolution changes nothing: the polls take workers that are gone out of placement.
//
// A worker should be found one way only: discovered, or registering with --router. (One that
// does both at the same address and role is one worker; its registration counts as its poll.)
//
// Thread-safety: ResolveOnce() from one thread at a time; Start() and Stop() once each.
#ifndef BATON_ROUTER_WORKER_DISCOVERY_H_
#define BATON_ROUTER_WORKER_DISCOVERY_H_

#include <functional>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "baton/v1/common.pb.h"
#include "router/worker_registry.h"
#include "rpc/address_spec.h"

namespace baton::router {

struct WorkerSource {
  v1::WorkerRole role = v1::WORKER_ROLE_UNSPECIFIED;
  rpc::AddressSpec spec;
  std::string flag;  // the command-line flag that named it, for messages ("--decode")
};

struct WorkerDiscoveryOptions {
  std::vector<WorkerSource> sources;
  absl::Duration interval = absl::Seconds(5);
  // How a source is resolved now; tests inject one. Default: rpc::ResolveAddresses.
  std::function<absl::StatusOr<std::vector<std::string>>(const WorkerSource&)> resolve;
};

class WorkerDiscovery {
 public:
  // `registry` must outlive the discovery.
  WorkerDiscovery(WorkerRegistry* registry, WorkerDiscoveryOptions options);
  ~WorkerDiscovery();  // Stop()
  WorkerDiscovery(const WorkerDiscovery&) = delete;
  WorkerDiscovery& operator=(const WorkerDiscovery&) = delete;

  // Resolves every source now, then again every interval in the background.
  void Start();
  void Stop();

  // One round: resolves every source and brings the registry up to date (header comment).
  void ResolveOnce();

 private:
  WorkerRegistry* const registry_;
  const WorkerDiscoveryOptions options_;
  // Per source: the addresses it resolved to last and their worker ids.
  std::vector<std::map<std::string, std::string>> found_;
  std::vector<std::string> last_error_;  // per source: logged once until it changes
  absl::Notification stop_;
  std::thread thread_;
};

}  // namespace baton::router

#endif  // BATON_ROUTER_WORKER_DISCOVERY_H_
