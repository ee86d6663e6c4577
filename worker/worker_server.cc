#include "worker/worker_server.h"

#include <iostream>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "base/log.h"
#include "decode_worker/decode_batch.h"
#include "decode_worker/decode_service.h"
#include "decode_worker/reservation_table.h"
#include "engine/draft_proposer.h"
#include "engine/engine_loop.h"
#include "engine/kv_cache.h"
#include "engine/model.h"
#include "engine/ngram_proposer.h"
#include "engine/prefix_cache.h"
#include "engine/tensor_parallel_group.h"
#include "engine/transformer.h"
#include "grammar/output_grammar.h"
#include "kernels/backend_factory.h"
#include "kvtransfer/kv_transfer_service.h"
#include "kvtransfer/kv_transport.h"
#include "kvtransfer/link_acceptor.h"
#include "kvtransfer/nccl/nccl_link_factory.h"
#include "metrics/metrics.h"
#include "metrics/metrics_http_server.h"
#include "metrics/prefix_cache_metrics.h"
#include "prefill_worker/prefill_scheduler.h"
#include "prefill_worker/prefill_service.h"
#include "rpc/address_spec.h"
#include "worker/role_switch.h"
#include "worker/router_links.h"
#include "worker/worker_control_service.h"

namespace baton::worker {

struct WorkerServer::Impl {
  WorkerOptions options;
  std::unique_ptr<engine::Model> model;
  std::unique_ptr<kernels::Backend> backend;
  // The forward pass and the cache its blocks are reserved in: a Transformer and its cache, or a
  // tensor-parallel group (--tensor-parallel) and rank 0's cache, with the ranks' caches as the
  // whole model's blocks for the hand-off.
  std::unique_ptr<engine::KvCache> single_cache;
  std::unique_ptr<engine::Transformer> single_transformer;
  std::unique_ptr<engine::TensorParallelGroup> group;
  engine::KvCache* kv = nullptr;
  engine::ForwardPass* pass = nullptr;
  engine::KvShards* kv_shards = nullptr;  // null without a group
  std::unique_ptr<engine::PrefixCache> prefix_cache;
  baton::v1::ModelIdentity identity;
  std::unique_ptr<grammar::OutputGrammarCompiler> grammars;  // structured output
  // Declared before the parts its steps drive: Shutdown stops it, and it is destroyed after
  // them, so their threads (the prefill finishers) may Wake it until they are gone.
  std::unique_ptr<engine::EngineLoop> loop;

  // Decode side.
  std::unique_ptr<engine::Model> draft_model;
  std::unique_ptr<engine::Proposer> proposer;
  std::unique_ptr<decode_worker::ReservationTable> reservations;
  std::unique_ptr<decode_worker::DecodeBatch> batch;
  std::unique_ptr<decode_worker::DecodeService> decode_service;
  std::unique_ptr<kvtransfer::LinkFactory> links;        // null: none (no GPU or no NCCL)
  std::unique_ptr<kvtransfer::LinkAcceptor> link_acceptor;
  std::unique_ptr<grpc::Service> kv_service;
  // Prefill side.
  std::unique_ptr<kvtransfer::KvTransport> transport;
  std::unique_ptr<prefill_worker::PrefillScheduler> scheduler;
  std::unique_ptr<prefill_worker::PrefillService> prefill_service;
  // Which side takes new work; destroyed before the sides its drain reads.
  std::unique_ptr<RoleSwitch> role_switch;
  std::unique_ptr<WorkerControlService> control_service;

  rpc::StartedServer server;

  // The address the worker is known by (set once the server listens; read by any thread).
  void SetAddress(std::string address) {
    absl::MutexLock lock(&address_mu_);
    address_ = std::move(address);
  }
  std::string Address() const {
    absl::MutexLock lock(&address_mu_);
    return address_;
  }
  bool IsOwnAddress(const std::string& destination) const {
    absl::MutexLock lock(&address_mu_);
    return !address_.empty() && destination == address_;
  }

  std::unique_ptr<RouterLinks> router_links;

  // Tells the engine loop that work arrived (or blocks were freed); nothing before it starts.
  void Wake() {
    if (loop) loop->Wake();
  }

  std::unique_ptr<metrics::MetricsHttpServer> metrics_server;
  metrics::Registry::CollectorId metrics_collector = 0;

  baton::v1::WorkerLoad Load() const {
    baton::v1::WorkerLoad load;
    load.set_kv_blocks_free(kv->pool().n_free());
    load.set_kv_blocks_total(kv->pool().n_blocks());
    load.set_queued_prompt_tokens(scheduler->queued_prompt_tokens());
    load.set_prefill_tokens_per_second(scheduler->prompt_tokens_per_second());
    const prefill_worker::PrefillScheduler::Arrivals arrivals = scheduler->arrivals();
    load.set_prompt_tokens_arriving_per_second(arrivals.tokens_per_second);
    load.set_prompt_tokens_per_prompt(arrivals.tokens_per_prompt);
    load.set_running_sequences(batch->n_running() + batch->n_waiting());
    load.set_decode_step_seconds(batch->one_row_step_seconds());
    load.set_decode_row_cost(batch->row_cost());
    load.set_reservations(reservations->size());
    for (uint64_t hash : prefix_cache->Advertised(options.prefix_cache_advertise)) {
      load.add_cached_block_hashes(hash);
    }
    const metrics::PrefixCacheTotals totals = metrics::ReadPrefixCacheTotals();
    baton::v1::PrefixCacheStats& stats = *load.mutable_prefix_cache();
    stats.set_queried_tokens(totals.queried_tokens);
    stats.set_hit_tokens(totals.hit_tokens);
    stats.set_queried_blocks(totals.queried_blocks);
    stats.set_hit_blocks(totals.hit_blocks);
    stats.set_evicted_blocks(totals.evicted_blocks);
    stats.set_cached_blocks(kv->pool().n_cached());
    return load;
  }

  // Sets the gauges that mirror state; run when /metrics is rendered.
  void CollectMetrics() const;

 private:
  mutable absl::Mutex address_mu_;
  std::string address_ ABSL_GUARDED_BY(address_mu_);
};

void WorkerServer::Impl::CollectMetrics() const {
  metrics::Registry& r = metrics::Registry::Global();
  r.GetGauge("baton:num_prefill_tokens_queued", "Prompt tokens waiting to be prefilled.")
      .Set(static_cast<double>(scheduler->queued_prompt_tokens()));
  // Every role computes into its cache: prefill workers hold blocks while a prompt prefills.
  const int32_t total = kv->pool().n_blocks();
  const int32_t used = total - kv->pool().n_free();
  r.GetGauge("baton:kv_cache_blocks", "KV cache blocks, held and free.").Set(total);
  r.GetGauge("baton:kv_cache_blocks_used",
             "KV cache blocks held (decode: reservations and sequences; prefill: prompts).")
      .Set(used);
  r.GetGauge("baton:kv_cache_usage_perc", "KV cache usage: 1 means 100 percent.")
      .Set(total > 0 ? static_cast<double>(used) / total : 0.0);
  metrics::SetPrefixCachedBlocks(kv->pool().n_cached());
  r.GetGauge("baton:num_requests_running", "Sequences in the decode batch.")
      .Set(batch->n_running());
  r.GetGauge("baton:num_requests_waiting", "Sequences admitted, waiting for their first step.")
      .Set(batch->n_waiting());
  r.GetGauge("baton:num_reservations", "KV reservations not yet claimed by decoding.")
      .Set(reservations->size());
}

namespace {

// The decode batch's speculation: the proposer (made into `w`) and its settings.
absl::StatusOr<decode_worker::SpeculationOptions> MakeSpeculation(const SpeculativeOptions& options,
                                                                  WorkerServer::Impl& w) {
  decode_worker::SpeculationOptions speculation{
      .num_speculative_tokens = options.num_speculative_tokens,
      .disable_batch_size = options.disable_batch_size};
  switch (options.method) {
    case SpeculativeOptions::Method::kOff:
      return speculation;
    case SpeculativeOptions::Method::kNgram:
      w.proposer = engine::CreateNgramProposer();
      break;
    case SpeculativeOptions::Method::kDraft: {
      absl::StatusOr<std::unique_ptr<engine::Model>> draft =
          engine::Model::Load(options.draft_model_path);
      if (!draft.ok()) {
        return absl::Status(draft.status().code(), absl::StrCat("--speculative draft:",
                                                                options.draft_model_path, ": ",
                                                                draft.status().message()));
      }
      w.draft_model = std::move(*draft);
      absl::StatusOr<std::unique_ptr<engine::Proposer>> proposer = engine::CreateDraftProposer(
          w.draft_model.get(), *w.model, w.backend.get(),
          {.kv_cache_bytes = options.draft_kv_cache_bytes, .block_size = w.options.block_size});
      if (!proposer.ok()) return proposer.status();
      w.proposer = std::move(*proposer);
      // Decode reads every weight once per token: a draft token costs the draft's share of bytes.
      speculation.proposer_cost = static_cast<double>(w.draft_model->file().file_size()) /
                                  static_cast<double>(w.model->file().file_size());
      break;
    }
  }
  speculation.token_cost = options.token_cost;
  speculation.proposer = w.proposer.get();
  return speculation;
}

// The model's forward pass and KV cache of n_blocks blocks: one Transformer on the worker's
// backend, or a tensor-parallel group of CPU ranks sharing its threads (--tensor-parallel), each
// rank's cache as many blocks of its heads.
absl::Status BuildForwardPass(WorkerServer::Impl& w, int32_t n_blocks) {
  const WorkerOptions& options = w.options;
  const engine::ModelConfig& config = w.model->config();
  const engine::KvCacheOptions cache_options{.block_size = options.block_size,
                                             .n_blocks = n_blocks};
  if (options.tensor_parallel <= 1) {
    absl::StatusOr<std::unique_ptr<engine::KvCache>> cache =
        engine::KvCache::Create(config, cache_options, *w.backend);
    if (!cache.ok()) return cache.status();
    w.single_cache = std::move(*cache);
    w.single_transformer = std::make_unique<engine::Transformer>(
        &config, &w.model->weights(), w.backend.get(), w.single_cache.get());
    w.kv = w.single_cache.get();
    w.pass = w.single_transformer.get();
    return absl::OkStatus();
  }
  if (options.device.is_cuda()) {
    return absl::FailedPreconditionError(
        "--tensor-parallel runs on the CPU only so far: its ranks are threads sharing host "
        "memory (GPU ranks need the NCCL communicator)");
  }
  const int rank_threads = engine::RankThreads(options.n_threads, options.tensor_parallel);
  absl::StatusOr<std::unique_ptr<engine::TensorParallelGroup>> group =
      engine::TensorParallelGroup::Create(
          config, w.model->weights(),
          {.size = options.tensor_parallel,
           .cache = cache_options,
           .backend = [&](int32_t) -> absl::StatusOr<std::unique_ptr<kernels::Backend>> {
             return kernels::CreateBackend(options.device, {.n_threads = rank_threads});
           }});
  if (!group.ok()) return group.status();
  w.group = *std::move(group);
  w.kv = &w.group->cache();
  w.pass = w.group.get();
  w.kv_shards = &w.group->kv_shards();
  return absl::OkStatus();
}

// The decode side (every worker has both sides; its role says which takes new work): the
// reservations, the batch with its speculation, the Decode and KV-transfer services and the step.
absl::Status BuildDecodeSide(WorkerServer::Impl& w, std::vector<grpc::Service*>& services,
                             std::vector<engine::EngineLoop::Step>& steps) {
  WorkerServer::Impl* self = &w;
  const WorkerOptions& options = w.options;
  const engine::ModelConfig& config = w.model->config();
  w.reservations = std::make_unique<decode_worker::ReservationTable>(
      w.kv, decode_worker::ReservationTableOptions{
                .model_fingerprint = w.model->fingerprint(),
                .max_context = config.n_ctx_train,
                .push_stall_timeout = options.kv_stall_timeout,
                .reserve_ahead_tokens = options.kv_reserve_ahead,
                .prefix_cache = w.prefix_cache.get(),
                .kv_shards = w.kv_shards});
  absl::StatusOr<decode_worker::SpeculationOptions> speculation =
      MakeSpeculation(options.speculative, w);
  if (!speculation.ok()) return speculation.status();
  w.batch = std::make_unique<decode_worker::DecodeBatch>(
      &w.model->tokenizer(), w.pass, w.kv,
      decode_worker::DecodeBatchOptions{.max_batch = options.max_decode_batch,
                                        .speculation = *speculation,
                                        .prefix_cache = w.prefix_cache.get()});
  w.decode_service = std::make_unique<decode_worker::DecodeService>(
      w.reservations.get(), w.batch.get(),
      decode_worker::DecodeServiceOptions{.model = w.identity,
                                          .role = [self] { return self->role_switch->role(); },
                                          .n_vocab = config.n_vocab,
                                          .grammars = w.grammars.get()},
      [self] { return self->Load(); }, [self] { self->Wake(); });
  if (w.links != nullptr) {
    w.link_acceptor = std::make_unique<kvtransfer::LinkAcceptor>(w.links.get());
  }
  w.kv_service = kvtransfer::CreateKvTransferService(w.reservations.get(), w.link_acceptor.get());
  services.push_back(w.decode_service.get());
  services.push_back(w.kv_service.get());
  steps.push_back([self] {
    self->reservations->ExpireLeases();
    return self->batch->Step();
  });
  return absl::OkStatus();
}

// The prefill side: the KV transport (in-process to this worker's own reservations, gRPC or NCCL
// links to others), the scheduler, the Prefill service and its step, which runs first: a waiting
// prompt is a user waiting for a first token. `links_status` says why there are no NCCL links.
absl::Status BuildPrefillSide(WorkerServer::Impl& w, const absl::Status& links_status,
                              std::vector<grpc::Service*>& services,
                              std::vector<engine::EngineLoop::Step>& steps) {
  WorkerServer::Impl* self = &w;
  const WorkerOptions& options = w.options;
  const engine::ModelConfig& config = w.model->config();
  auto wake = [self] { self->Wake(); };
  absl::StatusOr<std::unique_ptr<kvtransfer::KvTransport>> transport =
      kvtransfer::CreateChosenKvTransport(options.kv_transport,
                                          {.chunk_bytes = options.kv_chunk_bytes,
                                           .n_streams = options.kv_streams,
                                           .client = options.peers},
                                          w.links.get(), links_status);
  if (!transport.ok()) return transport.status();
  // KV for this worker's own reservations goes to them without the network; a router may also
  // pair this worker's prefill with another decode worker.
  w.transport = kvtransfer::CreateColocatedKvTransport(
      kvtransfer::CreateInProcessKvTransport(w.reservations.get()), *std::move(transport),
      [self](const std::string& destination) { return self->IsOwnAddress(destination); });
  w.scheduler = std::make_unique<prefill_worker::PrefillScheduler>(
      w.pass, w.kv, w.transport.get(),
      prefill_worker::PrefillSchedulerOptions{.max_batch_tokens = options.max_batch_tokens,
                                              .model_fingerprint = w.model->fingerprint(),
                                              .prefix_cache = w.prefix_cache.get(),
                                              .blocks_freed = wake,
                                              .kv_shards = w.kv_shards});
  w.prefill_service = std::make_unique<prefill_worker::PrefillService>(
      w.scheduler.get(),
      prefill_worker::PrefillServiceOptions{
          .model = w.identity,
          .role = [self] { return self->role_switch->role(); },
          .n_vocab = config.n_vocab,
          .max_prompt_tokens = static_cast<int32_t>(
              std::min<int64_t>(config.n_ctx_train, w.kv->MaxSequenceTokens())),
          .grammars = w.grammars.get()},
      [self] { return self->Load(); }, wake);
  services.push_back(w.prefill_service.get());
  steps.insert(steps.begin(), [self] { return self->scheduler->Step(); });
  return absl::OkStatus();
}

}  // namespace

WorkerServer::WorkerServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

WorkerServer::~WorkerServer() { Shutdown(std::chrono::milliseconds(0)); }

int WorkerServer::port() const { return impl_->server.port; }
std::string WorkerServer::address() const { return impl_->Address(); }
std::string WorkerServer::metrics_address() const {
  return impl_->metrics_server ? impl_->metrics_server->address() : "";
}

absl::StatusOr<std::unique_ptr<WorkerServer>> WorkerServer::Start(const WorkerOptions& options) {
  if (!options.routers.empty()) {
    // A malformed spec fails before the model loads; a name not resolving yet is retried.
    absl::StatusOr<rpc::AddressSpec> routers = rpc::ParseAddressSpec("--router", options.routers);
    if (!routers.ok()) return routers.status();
  }
  auto impl = std::make_unique<Impl>();
  Impl& w = *impl;
  w.options = options;
  absl::StatusOr<std::unique_ptr<engine::Model>> model = engine::Model::Load(options.model_path, options.load);
  if (!model.ok()) return model.status();
  w.model = std::move(*model);
  const engine::ModelConfig& config = w.model->config();
  // Every metric series names the model as the router does.
  metrics::Registry::Global().SetConstantLabels({{"model_name", w.model->id()}});
  absl::StatusOr<std::unique_ptr<kernels::Backend>> backend =
      kernels::CreateBackend(options.device, {.n_threads = options.n_threads});
  if (!backend.ok()) return backend.status();
  w.backend = *std::move(backend);
  const int32_t n_blocks =
      engine::KvCache::BlocksForBytes(config, options.block_size, options.kv_cache_bytes);
  const int32_t n_groups = engine::KvCache::LayerGroups(config).n_groups();
  if (n_blocks < n_groups) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--kv-cache-memory ", options.kv_cache_bytes, " bytes holds ", n_blocks,
        " KV blocks of this model (",
        engine::KvCache::BlockBytes(config, options.block_size), " bytes each), fewer than its ",
        n_groups, " layer groups need for one block of tokens"));
  }
  if (absl::Status s = BuildForwardPass(w, n_blocks); !s.ok()) return s;
  w.kv->pool().set_eviction_observer([](int32_t n) { metrics::RecordPrefixEvictions(n); });
  w.prefix_cache = std::make_unique<engine::PrefixCache>(w.kv, w.model->fingerprint(),
                                                         options.prefix_caching);
  w.identity.set_name(config.name);
  w.identity.set_fingerprint(w.model->fingerprint());
  w.identity.set_n_layer(config.n_layer);
  w.identity.set_kv_dim(config.kv_dim());
  w.identity.set_block_size(options.block_size);
  w.identity.set_n_ctx(config.n_ctx_train);
  w.identity.set_kv_reserve_ahead_tokens(options.kv_reserve_ahead);
  for (int32_t window : w.kv->groups().windows) w.identity.add_kv_group_windows(window);

  // NCCL links where the KV cache is on a GPU and NCCL loads (kvtransfer/nccl/).
  absl::StatusOr<std::unique_ptr<kvtransfer::LinkFactory>> links =
      kvtransfer::CreateNcclLinkFactory(options.device);
  if (links.ok()) {
    w.links = *std::move(links);
  } else if (options.device.is_cuda()) {
    BATON_LOG(WARNING) << "KV moves over gRPC only: " << links.status().message();
  }

  Impl* self = &w;
  // Structured output: the model's vocabulary for the grammars both sides draw tokens under.
  w.grammars =
      std::make_unique<grammar::OutputGrammarCompiler>(w.model->tokenizer(), config.n_vocab);
  w.role_switch = std::make_unique<RoleSwitch>(
      options.role,
      RoleSwitchParts{
          .prefill_held = [self] { return self->scheduler->queued_prompt_tokens(); },
          .decode_held =
              [self] {
                return int64_t{self->batch->n_running()} + self->batch->n_waiting() +
                       self->reservations->size();
              },
          .end_decode = [self](const absl::Status& why) { self->batch->EndAll(why); },
          .address = [self] { return self->Address(); }});
  w.control_service = std::make_unique<WorkerControlService>(w.role_switch.get());
  std::vector<grpc::Service*> services = {w.control_service.get()};
  std::vector<engine::EngineLoop::Step> steps;
  if (absl::Status decode = BuildDecodeSide(w, services, steps); !decode.ok()) return decode;
  if (absl::Status prefill = BuildPrefillSide(w, links.status(), services, steps);
      !prefill.ok()) {
    return prefill;
  }
  if (options.metrics_port >= 0) {
    metrics::MetricsHttpServerOptions metrics_options;
    metrics_options.host = options.metrics_host;
    metrics_options.port = options.metrics_port;
    absl::StatusOr<std::unique_ptr<metrics::MetricsHttpServer>> metrics_server =
        metrics::MetricsHttpServer::Start(metrics_options);
    if (!metrics_server.ok()) return metrics_server.status();
    w.metrics_server = std::move(*metrics_server);
  }
  w.loop = std::make_unique<engine::EngineLoop>(std::move(steps));
  w.loop->Start();
  absl::StatusOr<rpc::StartedServer> server = rpc::StartServer(options.server, services);
  if (!server.ok()) return server.status();
  w.server = std::move(*server);
  w.SetAddress(!options.advertise_address.empty()
                   ? options.advertise_address
                   : absl::StrCat(options.server.host, ":", w.server.port));
  if (!options.routers.empty()) {
    baton::v1::RegisterWorkerRequest registration;
    registration.set_address(w.Address());
    *registration.mutable_model() = w.identity;
    absl::StatusOr<std::unique_ptr<RouterLinks>> links =
        RouterLinks::Start({.routers = options.routers,
                            .client = options.peers,
                            .registration = registration,
                            .role = [self] { return self->role_switch->role(); },
                            .load = [self] { return self->Load(); },
                            .heartbeat_interval = options.heartbeat_interval});
    if (!links.ok()) return links.status();
    w.router_links = std::move(*links);
  }
  w.metrics_collector =
      metrics::Registry::Global().AddCollector([self] { self->CollectMetrics(); });
  self->CollectMetrics();
  return std::unique_ptr<WorkerServer>(new WorkerServer(std::move(impl)));
}

void WorkerServer::Shutdown(std::chrono::milliseconds grace) {
  if (impl_ == nullptr) return;
  impl_->router_links.reset();  // no heartbeat from here on
  if (impl_->server.server) {
    impl_->server.server->Shutdown(std::chrono::system_clock::now() + grace);
    impl_->server.server.reset();
  }
  if (impl_->loop) impl_->loop->Stop();
  metrics::Registry::Global().RemoveCollector(impl_->metrics_collector);
  if (impl_->metrics_server) impl_->metrics_server->Stop();
}

}  // namespace baton::worker
