// The router as one object: its options, the served model's tokenizer, the worker registry, the
// request pool and queue, the static-worker poller, the gRPC server (`baton router`) and, when
// http_port >= 0, the OpenAI-compatible HTTP server (router/http_server.h).
//
//   Router router({.server = {.port = 7070}, .model_path = "model.gguf",
//                  .prefill_workers = {"10.0.0.1:7100"}, .decode_workers = {"10.0.0.2:7200"}});
//   if (absl::Status s = router.Start(); !s.ok()) ...
//   router.Wait();  // until another thread calls Shutdown()
//
// Thread-safety: Start() once, before anything else; then every method from any thread.
#ifndef BATON_ROUTER_ROUTER_SERVER_H_
#define BATON_ROUTER_ROUTER_SERVER_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "engine/model.h"
#include "metrics/metrics.h"
#include "router/generate_reactor.h"
#include "router/http_server.h"
#include "router/placement_policy.h"
#include "router/planner_service.h"
#include "router/role_changer.h"
#include "router/service_time_model.h"
#include "router/request_driver.h"
#include "router/request_pool.h"
#include "router/request_table.h"
#include "router/router_service.h"
#include "router/served_model.h"
#include "router/static_worker_poller.h"
#include "router/worker_discovery.h"
#include "router/worker_channels.h"
#include "router/worker_registry.h"
#include "rpc/server_options.h"

namespace baton::router {

struct RouterOptions {
  rpc::ServerOptions server;   // where the router listens, its token, TLS
  rpc::ClientOptions workers;  // how it calls workers: their token, TLS
  std::string model_path;      // the GGUF file the workers serve (tokenizer, context, fingerprint)
  engine::LoadOptions load;    // loaded as the workers load it (the same fingerprint)
  int32_t n_ctx = 0;           // > 0: cap on prompt + max_tokens; 0: the model's context
  std::string chat_template;   // --chat-template NAME|FILE; empty: the model's
  std::string tool_call_parser;  // --tool-call-parser NAME; empty: the chat template's format
  // Static workers (host:port), polled with Status every heartbeat interval; workers may also
  // register themselves.
  std::vector<std::string> prefill_workers;    // --prefill
  std::vector<std::string> decode_workers;     // --decode
  std::vector<std::string> colocated_workers;  // --colocated (role both)
  // Workers found by name (--prefill/--decode/--colocated dns:NAME:PORT or k8s:SERVICE:PORT),
  // resolved again every discovery_interval and polled as static workers
  // (router/worker_discovery.h).
  std::vector<WorkerSource> discovered_workers;
  absl::Duration discovery_interval = absl::Seconds(5);
  absl::Duration heartbeat_interval = absl::Milliseconds(500);
  absl::Duration heartbeat_timeout = absl::ZeroDuration();  // 0: 3 x heartbeat_interval
  PlacementPolicy placement = PlacementPolicy::kKvAware;  // --policy
  ServiceTargets targets;  // --slo-ttft-ms, --slo-tpot-ms
  // The SLO planner (router/capacity_planner.h): off, making its moves (--planner slo: registered
  // workers change role in place) or recommending only (--planner recommend). It needs both
  // targets; its options' targets are these.
  enum class Planner { kOff, kAct, kRecommend };
  Planner planner = Planner::kOff;
  CapacityPlannerOptions planner_options;
  absl::Duration planner_interval = absl::Seconds(5);
  absl::Duration planner_drain_timeout = absl::Seconds(10);  // --planner-drain-ms
  int max_queued = 256;   // --max-queued: requests waiting for capacity or a thread
  int max_running = 256;  // request threads: requests being driven at once
  absl::Duration request_timeout = absl::Minutes(10);  // whole request, when the client sets none
  // Each request's timeouts and migration limit (--prefill-timeout, --no-worker-timeout,
  // --reservation-lease, --stall-timeout, --migration-limit). Its queue_poll_interval is the
  // heartbeat interval.
  RequestDriverOptions requests;
  absl::Duration drain_timeout = absl::Seconds(30);    // Shutdown: in-flight requests get this long
  // The OpenAI-compatible HTTP API: -1 none, 0 any free port. It requires "Authorization: Bearer
  // KEY" with api_key or the cluster token (server.auth_token) when either is set.
  std::string http_host = "127.0.0.1";  // --http-host
  int http_port = -1;                   // --http-port
  std::string api_key;                  // --api-key
  // Its limits and timeouts (--http-max-connections, ...); host, port and keys come from the
  // fields above.
  HttpServerOptions http;
};

class Router {
 public:
  explicit Router(RouterOptions options);
  ~Router();  // Shutdown()
  Router(const Router&) = delete;
  Router& operator=(const Router&) = delete;

  // Loads the model's tokenizer and config (no forward pass), polls the static workers once, and
  // starts serving. INVALID_ARGUMENT for bad options; the model's load error; UNAVAILABLE when
  // the port cannot be bound.
  absl::Status Start();

  // The port it listens on (the OS's pick when options.server.port was 0) and host:port.
  int port() const { return port_; }
  std::string address() const;
  // The HTTP API's port and host:port; 0 and "" when it is off.
  int http_port() const;
  std::string http_address() const;

  // Drains: refuses new requests, lets in-flight ones finish (cancelling those still running
  // after drain_timeout), then stops. Idempotent.
  void Shutdown();
  // Blocks until Shutdown() has completed.
  void Wait();

  const RouterOptions& options() const { return options_; }
  const ServedModel& model() const { return *model_; }
  WorkerRegistry& registry() { return *registry_; }
  RequestTable& requests() { return *table_; }

 private:
  // Stops the discovery's and the poller's threads.
  void StopWatchingWorkers();

  const RouterOptions options_;
  std::unique_ptr<ServedModel> model_;
  std::unique_ptr<WorkerRegistry> registry_;
  std::unique_ptr<RequestTable> table_;
  std::unique_ptr<WorkerChannels> channels_;
  std::unique_ptr<RequestPool> pool_;
  std::unique_ptr<WorkerDiscovery> discovery_;
  std::unique_ptr<StaticWorkerPoller> poller_;
  std::unique_ptr<RoleChanger> role_changer_;
  std::unique_ptr<PlannerService> planner_;
  std::atomic<bool> draining_{false};
  GenerateEnv env_;
  std::unique_ptr<RouterService> service_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
  std::unique_ptr<HttpServer> http_;
  metrics::Registry::CollectorId metrics_collector_ = 0;  // sets the request gauges

  absl::Mutex shutdown_mu_;
  bool started_ ABSL_GUARDED_BY(shutdown_mu_) = false;
  bool shut_down_ ABSL_GUARDED_BY(shutdown_mu_) = false;
  absl::Notification stopped_;
};

}  // namespace baton::router

#endif  // BATON_ROUTER_ROUTER_SERVER_H_
