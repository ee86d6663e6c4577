// A worker's registration and heartbeats with every router it reports to, so that any number of
// routers serve the same workers, each with the complete view (docs/DESIGN.md, "Routers as
// replicas"). The routers are named by an address spec (rpc/address_spec.h): a static list, or
// "dns:NAME:PORT", resolved again every resolve_interval: a router that appears gets its own
// link, one that vanishes loses its link.
// Each link registers with its router, then heartbeats every interval the router asks for; a
// router that answers "unknown worker" (it restarted) is registered with again, so a restarted
// router rebuilds its view within one heartbeat period. Links are independent: a router that is
// down delays no other.
//
// Thread-safety: Start and the destructor from the owning thread; `role` and `load` are called
// from the links' threads, concurrently.
#ifndef BATON_WORKER_ROUTER_LINKS_H_
#define BATON_WORKER_ROUTER_LINKS_H_

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "baton/v1/router.pb.h"
#include "rpc/address_spec.h"
#include "rpc/server_options.h"

namespace baton::worker {

struct RouterLinkOptions {
  std::string routers;  // the address spec (header comment)
  rpc::ClientOptions client;
  // What registration sends: address and model; its role and load are filled in at each call.
  baton::v1::RegisterWorkerRequest registration;
  // The role served now, sent with each registration and heartbeat (it may change in place).
  std::function<baton::v1::WorkerRole()> role;
  std::function<baton::v1::WorkerLoad()> load;
  std::chrono::milliseconds heartbeat_interval{500};  // until a router asks for another
  std::chrono::milliseconds resolve_interval{5000};   // dns: specs
};

class RouterLinks {
 public:
  // INVALID_ARGUMENT for a malformed spec. A dns: name that does not resolve yet is not an
  // error: it is resolved again every resolve_interval.
  static absl::StatusOr<std::unique_ptr<RouterLinks>> Start(RouterLinkOptions options);
  ~RouterLinks();  // stops every link and waits for its thread
  RouterLinks(const RouterLinks&) = delete;
  RouterLinks& operator=(const RouterLinks&) = delete;

  // The routers linked now.
  std::vector<std::string> addresses() const;

 private:
  class Link;
  RouterLinks(RouterLinkOptions options, rpc::AddressSpec spec);
  // Links every address in `addresses` not linked yet; unlinks the others.
  void Update(const std::vector<std::string>& addresses);
  void ResolveLoop();

  const RouterLinkOptions options_;
  const rpc::AddressSpec spec_;
  absl::Notification stop_;
  std::thread resolver_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::unique_ptr<Link>> links_ ABSL_GUARDED_BY(mu_);
};

}  // namespace baton::worker

#endif  // BATON_WORKER_ROUTER_LINKS_H_
