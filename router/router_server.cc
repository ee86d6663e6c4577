#include "router/router_server.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "router/request_metrics.h"

namespace baton::router {

Router::Router(RouterOptions options) : options_(std::move(options)) {}

Router::~Router() { Shutdown(); }

void Router::StopWatchingWorkers() {
  if (planner_ != nullptr) planner_->Stop();
  if (discovery_ != nullptr) discovery_->Stop();
  poller_->Stop();
}

absl::Status Router::Start() {
  absl::MutexLock lock(&shutdown_mu_);
  if (started_) return absl::FailedPreconditionError("the router was already started");
  if (options_.model_path.empty()) return absl::InvalidArgumentError("no model path given");
  if (options_.max_queued < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_queued must be >= 0, got ", options_.max_queued));
  }
  if (options_.max_running < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_running must be >= 1, got ", options_.max_running));
  }
  if (options_.heartbeat_interval <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("heartbeat_interval must be positive");
  }
  if (options_.planner != RouterOptions::Planner::kOff && (options_.targets.ttft <= absl::ZeroDuration() ||
                           options_.targets.tpot <= absl::ZeroDuration())) {
    return absl::InvalidArgumentError(
        "the SLO planner needs both targets: --slo-ttft-ms and --slo-tpot-ms");
  }
  absl::StatusOr<std::unique_ptr<ServedModel>> model =
      ServedModel::Load(options_.model_path, options_.n_ctx, options_.chat_template,
                        options_.tool_call_parser, options_.load);
  if (!model.ok()) return model.status();
  model_ = std::move(*model);
  metrics::Registry::Global().SetConstantLabels({{"model_name", model_->id()}});

  registry_ = std::make_unique<WorkerRegistry>(
      WorkerRegistryOptions{.model_fingerprint = model_->fingerprint(),
                            .heartbeat_interval = options_.heartbeat_interval,
                            .heartbeat_timeout = options_.heartbeat_timeout,
                            .placement = options_.placement,
                            .targets = options_.targets});
  for (const std::string& a : options_.prefill_workers) {
    registry_->AddStatic(v1::WORKER_ROLE_PREFILL, a);
  }
  for (const std::string& a : options_.decode_workers) {
    registry_->AddStatic(v1::WORKER_ROLE_DECODE, a);
  }
  for (const std::string& a : options_.colocated_workers) {
    registry_->AddStatic(v1::WORKER_ROLE_BOTH, a);
  }
  table_ = std::make_unique<RequestTable>(options_.max_queued);
  channels_ = std::make_unique<WorkerChannels>(options_.workers);
  pool_ = std::make_unique<RequestPool>(options_.max_running);
  env_.driver = RequestDriverDeps{
      .model = model_.get(),
      .registry = registry_.get(),
      .table = table_.get(),
      .channels = channels_.get(),
      .options = options_.requests};
  env_.driver.options.queue_poll_interval = options_.heartbeat_interval;
  env_.pool = pool_.get();
  env_.request_timeout = options_.request_timeout;
  env_.draining = &draining_;
  role_changer_ = std::make_unique<RoleChanger>(registry_.get(), channels_.get());
  service_ = std::make_unique<RouterService>(&env_, role_changer_.get());

  if (!options_.discovered_workers.empty()) {
    discovery_ = std::make_unique<WorkerDiscovery>(
        registry_.get(), WorkerDiscoveryOptions{.sources = options_.discovered_workers,
                                                .interval = options_.discovery_interval});
    discovery_->Start();
  }
  if (options_.planner != RouterOptions::Planner::kOff) {
    const bool act = options_.planner == RouterOptions::Planner::kAct;
    CapacityPlannerOptions planner = options_.planner_options;
    planner.targets = options_.targets;
    planner.registered_only = act;
    planner_ = std::make_unique<PlannerService>(
        registry_.get(), PlannerServiceOptions{.planner = planner,
                                               .interval = options_.planner_interval,
                                               .role_changer = act ? role_changer_.get() : nullptr,
                                               .drain_timeout = options_.planner_drain_timeout});
    planner_->Start();
  }
  // Know the static workers before the first request arrives.
  poller_ = std::make_unique<StaticWorkerPoller>(registry_.get(), channels_.get());
  poller_->Start(std::min(registry_->heartbeat_timeout(), absl::Seconds(2)));

  absl::StatusOr<rpc::StartedServer> started = rpc::StartServer(options_.server, {service_.get()});
  if (!started.ok()) {
    StopWatchingWorkers();
    pool_->Stop();
    return started.status();
  }
  server_ = std::move(started->server);
  port_ = started->port;
  if (options_.http_port >= 0) {
    HttpServerOptions http = options_.http;
    http.host = options_.http_host;
    http.port = options_.http_port;
    for (const std::string& key : {options_.api_key, options_.server.auth_token}) {
      if (!key.empty()) http.api_keys.push_back(key);
    }
    http_ = std::make_unique<HttpServer>(std::move(http), &env_);
    if (absl::Status s = http_->Start(); !s.ok()) {
      http_.reset();
      server_->Shutdown();
      StopWatchingWorkers();
      pool_->Stop();
      return s;
    }
  }
  // Registered last: Shutdown() (which removes it) runs only for a started router.
  RequestMetrics::Get();  // the request histograms are exported from the start
  metrics_collector_ = metrics::Registry::Global().AddCollector([table = table_.get()] {
    metrics::Registry& r = metrics::Registry::Global();
    r.GetGauge("baton:num_requests_running", "Requests being served (not waiting in the queue).")
        .Set(table->active());
    r.GetGauge("baton:num_requests_waiting", "Requests waiting in the router's queue.")
        .Set(table->queued());
  });
  started_ = true;
  return absl::OkStatus();
}

std::string Router::address() const {
  const std::string& host = options_.server.host;
  return host.find(':') != std::string::npos ? absl::StrCat("[", host, "]:", port_)
                                             : absl::StrCat(host, ":", port_);
}

int Router::http_port() const { return http_ != nullptr ? http_->port() : 0; }

std::string Router::http_address() const { return http_ != nullptr ? http_->address() : ""; }

void Router::Shutdown() {
  {
    absl::MutexLock lock(&shutdown_mu_);
    if (!started_ || shut_down_) return;
    shut_down_ = true;
  }
  draining_.store(true);
  // Waits for the calls in flight, gRPC then HTTP, under one deadline; those still running at
  // the deadline are cancelled (their drivers then free what they hold and close).
  const absl::Time deadline = absl::Now() + options_.drain_timeout;
  server_->Shutdown(absl::ToChronoTime(deadline));
  if (http_ != nullptr) http_->Shutdown(deadline);
  pool_->Stop();
  StopWatchingWorkers();
  metrics::Registry::Global().RemoveCollector(metrics_collector_);
  stopped_.Notify();
}

void Router::Wait() { stopped_.WaitForNotification(); }

}  // namespace baton::router
