// baton router: the request intake. Workers register with it (or are listed with --prefill,
// --decode, --colocated); clients call its gRPC API, and with --http-port its OpenAI-compatible
// HTTP API.
#include <iostream>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "base/log.h"
#include "cli/command.h"
#include "cli/serve_flags.h"
#include "rpc/address_spec.h"
#include "router/router_server.h"

namespace baton::cli {
namespace {

// --http-max-connections, --http-max-connections-per-client, --http-backlog,
// --http-header-timeout, --http-body-timeout; unset ones keep HttpServerOptions' defaults.
absl::Status ParseHttpLimits(const Flags& flags, router::HttpServerOptions& http) {
  absl::StatusOr<int64_t> v =
      flags.GetInt("http-max-connections", http.max_connections, 1, 1 << 20);
  if (!v.ok()) return v.status();
  http.max_connections = static_cast<int>(*v);
  if (!(v = flags.GetInt("http-max-connections-per-client", http.max_connections_per_client, 1,
                         1 << 20))
           .ok()) {
    return v.status();
  }
  http.max_connections_per_client = static_cast<int>(*v);
  if (!(v = flags.GetInt("http-backlog", http.backlog, 1, 65535)).ok()) return v.status();
  http.backlog = static_cast<int>(*v);
  if (!(v = flags.GetInt("http-header-timeout", absl::ToInt64Seconds(http.header_timeout), 1,
                         3600))
           .ok()) {
    return v.status();
  }
  http.header_timeout = absl::Seconds(*v);
  if (!(v = flags.GetInt("http-body-timeout", absl::ToInt64Seconds(http.body_timeout), 1, 3600))
           .ok()) {
    return v.status();
  }
  http.body_timeout = absl::Seconds(*v);
  return absl::OkStatus();
}

}  // namespace

int RunRouter(const Args& args) {
  std::vector<FlagSpec> specs = ServeFlagSpecs();
  const std::vector<FlagSpec> own = {
      {"model", "PATH", "the model the workers serve (default: the default model)"},
      QuantizeFlagSpec(),
      {"chat-template", "NAME|FILE", "render chats with this Jinja template: a file, or one "
                                     "built in (chatml, llama3, gemma); default: the model's own"},
      {"tool-call-parser", "NAME", "how chat outputs are read for tool calls: hermes, llama3_json "
                                   "or mistral; default: the format the chat template shows"},
      {"prefill", "ADDRS",
       "prefill workers: host:port,...; dns:NAME:PORT (every address NAME resolves to) or "
       "k8s:SERVICE[.NAMESPACE]:PORT (a Kubernetes Service's ready endpoints), again every 5 s, "
       "a worker that leaves drained"},
      {"decode", "ADDRS", "decode workers: as --prefill"},
      {"colocated", "ADDRS", "colocated workers (role both): as --prefill"},
      {"policy", "POLICY", "where requests go: kv-aware (default: the workers holding most of "
                           "the prompt's KV in their prefix caches, against their load) | "
                           "least-loaded | round-robin"},
      {"placement", "POLICY", "the same as --policy (its older name)"},
      {"slo-ttft-ms", "MS", "time to first token to aim for: kv-aware placement takes a cached "
                            "prefix where that keeps within it, and spreads load where nothing "
                            "does (default: none, the fastest predicted)"},
      {"slo-tpot-ms", "MS", "time per output token to aim for, likewise for decode workers"},
      {"planner", "MODE", "off (default) | slo: predict which side will miss its SLO first and "
                          "move a registered worker's role there, in place | recommend: publish "
                          "the counts per role instead (metric baton:planner_recommended_workers,"
                          " for an autoscaler); both log each move and need both --slo-* flags"},
      {"planner-interval-ms", "MS", "how often the planner looks (default 5000)"},
      {"planner-dwell-s", "S", "at most one move per this long (default 60)"},
      {"planner-drain-ms", "MS", "how long a worker leaving the decode role lets its sequences "
                                 "run before they migrate (default 10000)"},
      {"max-queued", "N", "requests waiting for capacity at most (default 256); then "
                          "RESOURCE_EXHAUSTED"},
      {"heartbeat-ms", "MS", "worker heartbeat interval (default 500)"},
      {"discovery-interval-ms", "MS",
       "how often dns: and k8s: worker specs are resolved again (default 5000)"},
      {"prefill-timeout", "SECONDS", "deadline of one Prefill call (default 60)"},
      {"request-timeout", "SECONDS", "deadline of a whole request whose client sets none "
                                     "(default 600)"},
      {"no-worker-timeout", "SECONDS", "a request fails with UNAVAILABLE once no healthy decode "
                                       "(or prefill) worker has existed for this long "
                                       "(default 10)"},
      {"reservation-lease", "SECONDS", "how long a decode reservation waits for its KV (default 30)"},
      {"stall-timeout", "SECONDS", "a Decode stream that sends no token for this long is stalled: "
                                   "the request leaves that worker (default 30)"},
      {"migration-limit", "N", "times a request whose worker dies or stalls moves to another "
                               "prefill/decode pair, continuing its stream (default 2; 0: fail "
                               "it instead)"},
      {"http-port", "PORT", "serve the OpenAI-compatible HTTP API on this port (0: any free "
                            "port; default: no HTTP API)"},
      {"http-host", "HOST", "address the HTTP API listens on (default 127.0.0.1)"},
      {"api-key", "KEY", "HTTP clients must send 'Authorization: Bearer KEY' (the --token is "
                         "accepted too)"},
      {"http-max-connections", "N", "HTTP connections open at once (default 512); past it new "
                                    "ones get 503 at once"},
      {"http-max-connections-per-client", "N", "HTTP connections open at once from one IP "
                                               "address (default 64); past it 503"},
      {"http-backlog", "N", "listen() backlog of the HTTP port (default 1024)"},
      {"http-header-timeout", "SECONDS", "an HTTP request's headers must arrive within this "
                                         "(default 10); else 408"},
      {"http-body-timeout", "SECONDS", "its body within this after them (default 10); else 408"},
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
  absl::StatusOr<engine::LoadOptions> load = LoadOptionsFlag(*flags);
  if (!load.ok()) return UsageError("router", load.status(), usage);
  options.load = *load;
  options.chat_template = flags->GetOr("chat-template", "");
  options.tool_call_parser = flags->GetOr("tool-call-parser", "");
  for (auto [flag, role, list] :
       {std::tuple{"prefill", v1::WORKER_ROLE_PREFILL, &options.prefill_workers},
        std::tuple{"decode", v1::WORKER_ROLE_DECODE, &options.decode_workers},
        std::tuple{"colocated", v1::WORKER_ROLE_BOTH, &options.colocated_workers}}) {
    if (!flags->Has(flag)) continue;
    const std::string name = absl::StrCat("--", flag);
    absl::StatusOr<rpc::AddressSpec> spec = rpc::ParseAddressSpec(name, flags->GetOr(flag, ""));
    if (!spec.ok()) return UsageError("router", spec.status(), usage);
    if (spec->is_dynamic()) {
      options.discovered_workers.push_back({.role = role, .spec = *spec, .flag = name});
    } else {
      *list = spec->list;
    }
  }
  if (flags->Has("policy") && flags->Has("placement")) {
    return UsageError("router", absl::InvalidArgumentError(
                                    "--policy and --placement are one flag: give one of them"),
                      usage);
  }
  absl::StatusOr<router::PlacementPolicy> placement = router::ParsePlacementPolicy(
      flags->GetOr("policy", flags->GetOr("placement", "kv-aware")));
  if (!placement.ok()) return UsageError("router", placement.status(), usage);
  options.placement = *placement;
  for (auto [flag, target] : {std::pair{"slo-ttft-ms", &options.targets.ttft},
                              std::pair{"slo-tpot-ms", &options.targets.tpot}}) {
    absl::StatusOr<int64_t> ms = flags->GetInt(flag, 0, 0, 3600000);
    if (!ms.ok()) return UsageError("router", ms.status(), usage);
    *target = absl::Milliseconds(*ms);
  }
  const std::string planner = flags->GetOr("planner", "off");
  if (planner == "slo") {  // Router::Start checks that it has both targets
    options.planner = baton::router::RouterOptions::Planner::kAct;
  } else if (planner == "recommend") {
    options.planner = baton::router::RouterOptions::Planner::kRecommend;
  } else if (planner != "off") {
    return UsageError("router", absl::InvalidArgumentError(absl::StrCat(
                                    "--planner '", planner, "': use off, slo or recommend")),
                      usage);
  }
  absl::StatusOr<int64_t> v = flags->GetInt("planner-interval-ms", 5000, 100, 3600000);
  if (!v.ok()) return UsageError("router", v.status(), usage);
  options.planner_interval = absl::Milliseconds(*v);
  if (!(v = flags->GetInt("planner-dwell-s", 60, 0, 86400)).ok()) {
    return UsageError("router", v.status(), usage);
  }
  options.planner_options.dwell = absl::Seconds(*v);
  if (!(v = flags->GetInt("planner-drain-ms", 10000, 0, 3600000)).ok()) {
    return UsageError("router", v.status(), usage);
  }
  options.planner_drain_timeout = absl::Milliseconds(*v);
  if (!(v = flags->GetInt("max-queued", 256, 0, 1 << 20)).ok()) {
    return UsageError("router", v.status(), usage);
  }
  options.max_queued = static_cast<int>(*v);
  if (!(v = flags->GetInt("heartbeat-ms", 500, 10, 60000)).ok()) {
    return UsageError("router", v.status(), usage);
  }
  options.heartbeat_interval = absl::Milliseconds(*v);
  if (!(v = flags->GetInt("discovery-interval-ms", 5000, 100, 3600000)).ok()) {
    return UsageError("router", v.status(), usage);
  }
  options.discovery_interval = absl::Milliseconds(*v);
  if (!(v = flags->GetInt("prefill-timeout", 60, 1, 3600)).ok()) {
    return UsageError("router", v.status(), usage);
  }
  options.requests.prefill_timeout = absl::Seconds(*v);
  if (!(v = flags->GetInt("request-timeout", absl::ToInt64Seconds(options.request_timeout), 1,
                          86400))
           .ok()) {
    return UsageError("router", v.status(), usage);
  }
  options.request_timeout = absl::Seconds(*v);
  if (!(v = flags->GetInt("no-worker-timeout",
                          absl::ToInt64Seconds(options.requests.no_worker_wait), 0, 3600))
           .ok()) {
    return UsageError("router", v.status(), usage);
  }
  options.requests.no_worker_wait = absl::Seconds(*v);
  if (!(v = flags->GetInt("stall-timeout", absl::ToInt64Seconds(options.requests.stall_timeout),
                          1, 3600))
           .ok()) {
    return UsageError("router", v.status(), usage);
  }
  options.requests.stall_timeout = absl::Seconds(*v);
  if (!(v = flags->GetInt("migration-limit", options.requests.max_migrations, 0, 16)).ok()) {
    return UsageError("router", v.status(), usage);
  }
  options.requests.max_migrations = static_cast<int>(*v);
  // The decode worker caps leases at 120 s (decode_worker/reservation_table.h).
  if (!(v = flags->GetInt("reservation-lease", 30, 1, 120)).ok()) {
    return UsageError("router", v.status(), usage);
  }
  options.requests.reservation_lease = absl::Seconds(*v);
  if (flags->Has("http-port")) {
    if (!(v = flags->GetInt("http-port", 0, 0, 65535)).ok()) {
      return UsageError("router", v.status(), usage);
    }
    options.http_port = static_cast<int>(*v);
  }
  options.http_host = flags->GetOr("http-host", "127.0.0.1");
  options.api_key = flags->GetOr("api-key", "");
  if (absl::Status s = ParseHttpLimits(*flags, options.http); !s.ok()) {
    return UsageError("router", s, usage);
  }

  BlockShutdownSignals();
  router::Router router(options);
  if (absl::Status s = router.Start(); !s.ok()) return RunError("router", s);
  std::cout << "listening on " << router.address() << std::endl;
  if (options.http_port >= 0) {
    std::cout << "http listening on " << router.http_address() << std::endl;
  }
  const int signal = WaitForShutdownSignal();
  BATON_LOG(INFO) << "signal " << signal << ", draining";
  router.Shutdown();
  return 0;
}

}  // namespace baton::cli
