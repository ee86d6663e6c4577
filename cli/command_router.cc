// baton router: the request intake. Workers register with it (or are listed with --prefill,
// --decode, --colocated); clients call its gRPC API.
#include <iostream>

#include "absl/time/time.h"
#include "cli/command.h"
#include "cli/serve_flags.h"
#include "router/router_server.h"

namespace baton::cli {
int RunRouter(const Args& args) {
  std::vector<FlagSpec> specs = ServeFlagSpecs();
  const std::vector<FlagSpec> own = {
      {"model", "PATH", "the model the workers serve (default: the default model)"},
      {"prefill", "ADDRS", "static prefill workers, host:port,..."},
      {"decode", "ADDRS", "static decode workers, host:port,..."},
      {"colocated", "ADDRS", "static colocated workers (role both), host:port,..."},
      {"placement", "POLICY", "least-loaded (default) | round-robin"},
      {"max-queued", "N", "requests waiting for capacity at most (default 256); then "
                          "RESOURCE_EXHAUSTED"},
      {"heartbeat-ms", "MS", "worker heartbeat interval (default 500)"},
      {"help", "", "show this help"},
  };
  specs.insert(specs.end(), own.begin(), own.end());
  const std::string usage = Usage("router", "[flags]", specs);
  absl::StatusOr<Flags> flags = Flags::Parse(args, specs);
  if (!flags.ok()) return UsageError("router", flags.status(), usage);
  if (flags->Has("help")) {
    std::cout << usage;
    return 0;
  }
  router::RouterOptions options;
  if (absl::Status s = ParseServeFlags(*flags, options.server, options.workers); !s.ok()) {
    return UsageError("router", s, usage);
  }
  options.model_path = flags->GetOr("model", DefaultModelPath());
  for (auto [flag, list] : {std::pair{"prefill", &options.prefill_workers},
                             std::pair{"decode", &options.decode_workers},
                             std::pair{"colocated", &options.colocated_workers}}) {
    absl::StatusOr<std::vector<std::string>> addresses =
        router::ParseWorkerAddresses(flags->GetOr(flag, ""));
    if (!addresses.ok()) return UsageError("router", addresses.status(), usage);
    *list = *addresses;
  }
  absl::StatusOr<router::PlacementPolicy> placement =
      router::ParsePlacementPolicy(flags->GetOr("placement", "least-loaded"));
  if (!placement.ok()) return UsageError("router", placement.status(), usage);
  options.placement = *placement;
  absl::StatusOr<int64_t> v = flags->GetInt("max-queued", 256, 0, 1 << 20);
  if (!v.ok()) return UsageError("router", v.status(), usage);
  options.max_queued = static_cast<int>(*v);
  if (!(v = flags->GetInt("heartbeat-ms", 500, 10, 60000)).ok()) {
    return UsageError("router", v.status(), usage);
  }
  options.heartbeat_interval = absl::Milliseconds(*v);

  BlockShutdownSignals();
  router::Router router(options);
  if (absl::Status s = router.Start(); !s.ok()) return RunError("router", s);
  std::cout << "listening on " << router.address() << std::endl;
  const int signal = WaitForShutdownSignal();
  std::cerr << "baton router: signal " << signal << ", draining\n";
  router.Shutdown();
  return 0;
}

}  // namespace baton::cli
