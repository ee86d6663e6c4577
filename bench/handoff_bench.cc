#include "bench/handoff_bench.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "baton/v1/router.grpc.pb.h"
#include "bench/latency_stats.h"
#include "bench/tcp_loopback.h"
#include "decode_worker/reservation_table.h"
#include "engine/kv_cache.h"
#include "engine/model.h"
#include "kernels/backend.h"
#include "kernels/backend_factory.h"
#include "kvtransfer/kv_transfer_service.h"
#include "kvtransfer/kv_transport.h"
#include "kvtransfer/link_acceptor.h"
#include "kvtransfer/nccl/nccl_link_factory.h"
#include "prefill_worker/host_staging.h"
#include "rpc/server_options.h"
#include "rpc/status.h"

namespace baton::bench {
namespace {

using Clock = std::chrono::steady_clock;
constexpr int32_t kBlockSize = 16;  // the workers' default
constexpr auto kStartTimeout = std::chrono::seconds(120);

double Median(std::vector<double> v) { return Summarize(std::move(v)).median; }

nlohmann::json MedianOrNull(const std::vector<double>& v) {
  return v.empty() ? nlohmann::json() : nlohmann::json(Median(v));
}

// Deterministic ordinary token ids (above the low ids where special tokens live).
std::vector<int32_t> SyntheticTokens(int32_t n, int32_t n_vocab, uint64_t salt) {
  std::mt19937_64 rng(0x5eed ^ salt);
  std::vector<int32_t> ids(n);
  for (int32_t& id : ids) id = static_cast<int32_t>(UniformInt(rng, 256, n_vocab - 1));
  return ids;
}

// ---- The pure transfer: this process pushes into its own KvTransfer server over 127.0.0.1. ----

struct TransferResult {
  std::string transport;  // what the pushes went over (KvPush::transport_name)
  int64_t bytes = 0;
  std::vector<double> seconds;  // per repeat: StartPush -> last acknowledgement
};

// Both ends of the pure transfer: the memory of options.device, the receiver's table and its
// KvTransfer server on 127.0.0.1, and the sender's transport (options.transport; NCCL links
// where asked for, between two ends on the same GPU).
struct TransferEnds {
  std::unique_ptr<kernels::Backend> backend;
  std::unique_ptr<engine::KvCache> cache;
  std::unique_ptr<decode_worker::ReservationTable> table;
  std::unique_ptr<kvtransfer::LinkFactory> links;
  std::unique_ptr<kvtransfer::LinkAcceptor> acceptor;
  std::unique_ptr<grpc::Service> service;
  rpc::StartedServer server;
  std::unique_ptr<kvtransfer::KvTransport> transport;
  ~TransferEnds() {
    transport.reset();
    if (server.server) server.server->Shutdown();
  }
};

absl::StatusOr<std::unique_ptr<TransferEnds>> MakeTransferEnds(const engine::Model& model,
                                                               int32_t max_prompt,
                                                               int32_t max_blocks,
                                                               const HandoffBenchOptions& o) {
  auto ends = std::make_unique<TransferEnds>();
  absl::StatusOr<kernels::Device> device = kernels::ParseDevice(o.device);
  if (!device.ok()) return device.status();
  absl::StatusOr<kvtransfer::KvTransportChoice> choice =
      kvtransfer::ParseKvTransportChoice(o.transport);
  if (!choice.ok()) return choice.status();
  absl::StatusOr<std::unique_ptr<kernels::Backend>> backend =
      kernels::CreateBackend(*device, {.reference = true});
  if (!backend.ok()) return backend.status();
  ends->backend = *std::move(backend);
  absl::StatusOr<std::unique_ptr<engine::KvCache>> cache = engine::KvCache::Create(
      model.config(),
      {.block_size = kBlockSize,
       .n_blocks = engine::KvCache::BlocksForTokens(model.config(), kBlockSize,
                                                    int64_t{max_blocks} * kBlockSize)},
      *ends->backend);
  if (!cache.ok()) return cache.status();
  ends->cache = *std::move(cache);
  ends->table = std::make_unique<decode_worker::ReservationTable>(
      ends->cache.get(), decode_worker::ReservationTableOptions{
                             .model_fingerprint = model.fingerprint(),
                             .max_context = max_prompt + 1});
  absl::StatusOr<std::unique_ptr<kvtransfer::LinkFactory>> links =
      kvtransfer::CreateNcclLinkFactory(*device);
  if (links.ok()) {
    ends->links = *std::move(links);
    ends->acceptor = std::make_unique<kvtransfer::LinkAcceptor>(ends->links.get());
  }
  ends->service = kvtransfer::CreateKvTransferService(ends->table.get(), ends->acceptor.get());
  absl::StatusOr<rpc::StartedServer> server =
      rpc::StartServer({.host = "127.0.0.1", .port = 0}, {ends->service.get()});
  if (!server.ok()) return server.status();
  ends->server = *std::move(server);
  absl::StatusOr<std::unique_ptr<kvtransfer::KvTransport>> transport =
      kvtransfer::CreateChosenKvTransport(
          *choice, {.chunk_bytes = o.kv_chunk_bytes, .n_streams = o.kv_streams},
          ends->links.get(), links.status());
  if (!transport.ok()) return transport.status();
  ends->transport = *std::move(transport);
  return ends;
}

// The sender's KV: every layer's blocks (`layer_bytes` each), of arbitrary bytes, in memory of
// their own as in a KV cache (so that the push reads them from memory, not from a cache that one
// layer fits): host memory, or the device's.
struct SenderKv {
  kernels::Backend* backend = nullptr;
  uint8_t* data = nullptr;
  std::vector<uint8_t> host;
  ~SenderKv() {
    if (host.empty() && data != nullptr) backend->Free(data);
  }
};

absl::StatusOr<std::unique_ptr<SenderKv>> MakeSenderKv(kernels::Backend& backend, size_t bytes) {
  auto kv = std::make_unique<SenderKv>();
  kv->backend = &backend;
  std::vector<uint8_t> random(bytes);
  std::mt19937_64 rng(42);
  for (size_t i = 0; i + 8 <= random.size(); i += 8) {
    const uint64_t x = rng();
    std::memcpy(random.data() + i, &x, 8);
  }
  if (backend.host_memory()) {
    kv->host = std::move(random);
    kv->data = kv->host.data();
    return kv;
  }
  absl::StatusOr<void*> device = backend.Allocate(bytes);
  if (!device.ok()) return device.status();
  kv->data = static_cast<uint8_t*>(*device);
  backend.CopyToDevice(kv->data, random.data(), bytes);
  return kv;
}

absl::StatusOr<std::vector<TransferResult>> MeasureTransfers(const engine::Model& model,
                                                             const std::vector<int32_t>& prompts,
                                                             const HandoffBenchOptions& options,
                                                             std::ostream& log) {
  const engine::ModelConfig& config = model.config();
  const int32_t max_prompt = *std::max_element(prompts.begin(), prompts.end());
  const int32_t max_blocks = (max_prompt + kBlockSize) / kBlockSize + 1;
  absl::StatusOr<std::unique_ptr<TransferEnds>> made =
      MakeTransferEnds(model, max_prompt, max_blocks, options);
  if (!made.ok()) return made.status();
  TransferEnds& ends = **made;
  decode_worker::ReservationTable& table = *ends.table;
  const std::string address = absl::StrCat("127.0.0.1:", ends.server.port);
  kvtransfer::KvPushSpec shape;
  shape.n_layer = config.n_layer;
  shape.kv_dim = config.kv_dim();
  shape.kv_planes = config.kv_planes();
  shape.block_size = kBlockSize;
  for (int32_t layer = 0; layer < config.n_layer; ++layer) {
    shape.layer_windows.push_back(ends.cache->window(layer));
  }
  const size_t layer_bytes = static_cast<size_t>(shape.layer_block_bytes()) * max_blocks;
  absl::StatusOr<std::unique_ptr<SenderKv>> source =
      MakeSenderKv(*ends.backend, layer_bytes * shape.n_layer);
  if (!source.ok()) return source.status();
  // Blocks in a device's memory travel over gRPC from host copies, as a prefill worker's do.
  prefill_worker::HostStagingPool staging(*ends.backend, layer_bytes * shape.n_layer);
  std::string transport_used;

  auto push_once = [&](int32_t n_tokens, const std::string& name) -> absl::StatusOr<double> {
    absl::StatusOr<decode_worker::ReserveResult> reserved = table.Reserve(
        name, model.fingerprint(), n_tokens, 1, std::chrono::milliseconds(60000));
    if (!reserved.ok()) return reserved.status();
    kvtransfer::KvPushSpec spec = shape;
    spec.reservation_id = reserved->reservation_id;
    spec.model_fingerprint = model.fingerprint();
    spec.n_tokens = n_tokens;
    std::vector<const uint8_t*> blocks;
    absl::StatusOr<std::unique_ptr<kvtransfer::KvPush>> push = ends.transport->StartPush(
        address, spec, std::chrono::system_clock::now() + std::chrono::seconds(60));
    absl::Status status = push.status();
    std::vector<std::unique_ptr<prefill_worker::StagedLayer>> staged;
    for (int32_t layer = 0; status.ok() && layer < spec.n_layer; ++layer) {
      blocks.clear();  // a windowed layer sends the blocks its window still sees
      for (int32_t b = spec.LayerFirstBlock(layer); b < spec.n_blocks(); ++b) {
        blocks.push_back((*source)->data + layer * layer_bytes +
                         static_cast<size_t>(b) * spec.layer_block_bytes());
      }
      if (ends.backend->host_memory() || (*push)->reads_device_memory()) {
        status = (*push)->SendLayer(layer, blocks);
        continue;
      }
      absl::StatusOr<std::unique_ptr<prefill_worker::StagedLayer>> copy =
          staging.Stage(blocks, spec.layer_block_bytes());
      if (!copy.ok()) {
        status = copy.status();
        break;
      }
      status = (*push)->SendLayer(layer, (*copy)->blocks(), (*copy)->ready());
      staged.push_back(*std::move(copy));
    }
    absl::StatusOr<kvtransfer::KvPushStats> stats =
        status.ok() ? (*push)->Finish() : absl::StatusOr<kvtransfer::KvPushStats>(status);
    if (push.ok() && !stats.ok()) (*push)->Cancel();
    if (push.ok()) transport_used = std::string((*push)->transport_name());
    push = absl::CancelledError("done");  // before the staged copies it may read
    table.Release(reserved->reservation_id);
    if (!stats.ok()) return stats.status();
    if (stats->bytes_sent != spec.total_bytes()) {
      return absl::InternalError(absl::StrCat("pushed ", stats->bytes_sent, " bytes, expected ",
                                              spec.total_bytes()));
    }
    return stats->seconds;
  };

  // One unmeasured push first: connection set-up, first-touch of the receiver's cache pages.
  if (absl::StatusOr<double> warm = push_once(max_prompt, "warmup"); !warm.ok()) {
    return warm.status();
  }
  std::vector<TransferResult> results;
  for (int32_t p : prompts) {
    TransferResult r;
    kvtransfer::KvPushSpec spec = shape;
    spec.n_tokens = p;
    r.bytes = spec.total_bytes();
    for (int rep = 0; rep < options.repeats; ++rep) {
      absl::StatusOr<double> seconds = push_once(p, absl::StrCat("p", p, "-", rep));
      if (!seconds.ok()) return seconds.status();
      r.seconds.push_back(*seconds);
    }
    r.transport = transport_used;
    kvtransfer::KvPushSpec every_block = spec;
    every_block.layer_windows.clear();
    log << absl::StrFormat(
        "bench handoff: transfer %d tokens over %s: %d bytes (every layer's every block: %d), "
        "median %.3f ms (%.2f GB/s)\n",
        p, r.transport, r.bytes, every_block.total_bytes(), Median(r.seconds) * 1e3,
        r.bytes / Median(r.seconds) / 1e9);
    results.push_back(std::move(r));
  }
  return results;
}

// ---- End to end: routers and workers as processes. ----

struct Cluster {
  std::string name;
  std::vector<std::unique_ptr<BenchProcess>> processes;  // router first
  std::string router;
  std::unique_ptr<baton::v1::Router::Stub> stub;
};

absl::StatusOr<std::unique_ptr<BenchProcess>> StartProcess(const HandoffBenchOptions& o,
                                                           const ProcessPlacement& placement,
                                                           std::vector<std::string> argv,
                                                           const std::vector<int>& cpus,
                                                           std::string* address) {
  argv.insert(argv.end(), placement.listen.begin(), placement.listen.end());
  argv.insert(argv.begin(), o.baton_executable);
  argv.insert(argv.begin(), placement.prefix.begin(), placement.prefix.end());
  absl::StatusOr<std::unique_ptr<BenchProcess>> p = o.launcher(argv, cpus);
  if (!p.ok()) return p.status();
  absl::StatusOr<std::string> line = (*p)->WaitForLine("listening on ", kStartTimeout);
  if (!line.ok()) {
    return absl::UnavailableError(
        absl::StrCat("`baton ", argv[1], "` did not start: ", line.status().message()));
  }
  if (address) *address = *line;
  return p;
}

absl::Status WaitHealthy(Cluster& c, size_t n_workers) {
  const auto deadline = Clock::now() + kStartTimeout;
  while (Clock::now() < deadline) {
    grpc::ClientContext context;
    rpc::PrepareContext(context, {}, std::chrono::system_clock::now() + std::chrono::seconds(2));
    baton::v1::ClusterStatusResponse status;
    if (c.stub->ClusterStatus(&context, {}, &status).ok()) {
      size_t healthy = 0;
      for (const auto& w : status.workers()) healthy += w.healthy();
      if (healthy >= n_workers) return absl::OkStatus();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return absl::DeadlineExceededError(absl::StrCat(c.name, ": workers not healthy in time"));
}

// colocated == false: one prefill worker (core 0) and one decode worker (core 1).
absl::StatusOr<Cluster> StartCluster(const HandoffBenchOptions& o, bool colocated) {
  Cluster c;
  c.name = colocated ? "colocated" : "disaggregated";
  const std::vector<std::string> common = {"--model", o.model_path};
  const ProcessPlacement loopback;
  const ProcessPlacement& router_at = colocated ? loopback : o.router_placement;
  // An 8K-token prompt takes minutes to prefill on one core: give it the time.
  std::vector<std::string> argv = {"router", "--prefill-timeout", "600", "--reservation-lease",
                                   "120"};
  argv.insert(argv.end(), common.begin(), common.end());
  absl::StatusOr<std::unique_ptr<BenchProcess>> router =
      StartProcess(o, router_at, argv, {}, &c.router);
  if (!router.ok()) return router.status();
  c.processes.push_back(std::move(*router));
  const bool two_cores = std::thread::hardware_concurrency() >= 2;
  auto worker = [&](std::vector<std::string> role, const ProcessPlacement& placement, int threads,
                    const std::vector<int>& cpus) -> absl::Status {
    role.insert(role.end(), common.begin(), common.end());
    role.insert(role.end(), {"--router", c.router, "--threads", std::to_string(threads),
                             "--kv-cache-memory", o.kv_cache_memory, "--device", o.device});
    absl::StatusOr<std::unique_ptr<BenchProcess>> p =
        StartProcess(o, placement, role, two_cores ? cpus : std::vector<int>{}, nullptr);
    if (!p.ok()) return p.status();
    c.processes.push_back(std::move(*p));
    return absl::OkStatus();
  };
  absl::Status started;
  if (colocated) {
    const int threads = std::max(1, o.colocated_threads);
    started = worker({"worker", "--role", "both"}, loopback, threads,
                     threads == 1 ? std::vector<int>{0} : std::vector<int>{});
  } else {
    started = worker({"prefill", "--kv-transport", o.transport}, o.prefill_placement, 1, {0});
    if (started.ok()) started = worker({"decode"}, o.decode_placement, 1, {1});
  }
  if (!started.ok()) return started;
  absl::StatusOr<std::shared_ptr<grpc::Channel>> channel = rpc::MakeChannel(c.router, {});
  if (!channel.ok()) return channel.status();
  c.stub = baton::v1::Router::NewStub(*channel);
  if (absl::Status s = WaitHealthy(c, c.processes.size() - 1); !s.ok()) return s;
  return c;
}

struct E2eSample {
  bool ok = false;
  std::string error;
  double ttft_s = 0;         // client: sent -> first token
  double router_ttft_s = 0;  // the router's own
  int64_t kv_bytes = 0;
  double kv_transfer_s = 0;
  int32_t prompt_tokens = 0;
};

E2eSample SendTokens(Cluster& c, const std::vector<int32_t>& prompt, int32_t max_tokens,
                     std::chrono::seconds timeout) {
  baton::v1::GenerateRequest request;
  for (int32_t id : prompt) request.mutable_prompt_tokens()->add_ids(id);
  request.mutable_sampling()->set_temperature(0);
  request.mutable_sampling()->set_max_tokens(max_tokens);
  request.mutable_sampling()->set_ignore_eos(true);
  grpc::ClientContext context;
  rpc::PrepareContext(context, {}, std::chrono::system_clock::now() + timeout);
  StreamTimer timer(Clock::now());
  auto reader = c.stub->Generate(&context, request);
  baton::v1::GenerateResponse response, last;
  while (reader->Read(&response)) {
    timer.OnChunk(Clock::now(), response.tokens_size() > 0);
    if (response.has_timings()) last = response;
  }
  const grpc::Status status = reader->Finish();
  timer.OnEnd(Clock::now());
  E2eSample s;
  if (!status.ok()) {
    const absl::Status a = rpc::FromGrpcStatus(status);
    s.error = absl::StrCat(absl::StatusCodeToString(a.code()), ": ", a.message());
    return s;
  }
  RequestOutcome outcome;
  timer.Fill(outcome);
  s.ok = true;
  s.ttft_s = outcome.ttft_s;
  s.router_ttft_s = last.timings().ttft_seconds();
  s.kv_bytes = last.timings().kv_bytes();
  s.kv_transfer_s = last.timings().kv_transfer_seconds();
  s.prompt_tokens = last.usage().prompt_tokens();
  return s;
}

nlohmann::json E2eJson(const std::vector<E2eSample>& samples) {
  std::vector<double> ttft, router_ttft, transfer;
  nlohmann::json errors = nlohmann::json::array();
  int64_t kv_bytes = 0;
  for (const E2eSample& s : samples) {
    if (!s.ok) {
      errors.push_back(s.error);
      continue;
    }
    ttft.push_back(s.ttft_s * 1e3);
    router_ttft.push_back(s.router_ttft_s * 1e3);
    transfer.push_back(s.kv_transfer_s * 1e3);
    kv_bytes = s.kv_bytes;
  }
  nlohmann::json j = {{"completed", ttft.size()},
                      {"errors", errors},
                      {"ttft_ms", ttft},
                      {"ttft_ms_median", MedianOrNull(ttft)},
                      {"router_ttft_ms_median", MedianOrNull(router_ttft)},
                      {"kv_bytes", kv_bytes},
                      {"kv_transfer_ms_median", MedianOrNull(transfer)}};
  if (!transfer.empty() && Median(transfer) > 0 && kv_bytes > 0) {
    j["kv_gb_per_s"] = kv_bytes / (Median(transfer) / 1e3) / 1e9;
  }
  return j;
}

}  // namespace

absl::StatusOr<nlohmann::json> RunHandoffBench(const HandoffBenchOptions& options,
                                               std::ostream& log) {
  if (options.prompt_tokens.empty()) return absl::InvalidArgumentError("no prompt lengths");
  if (options.repeats < 1) return absl::InvalidArgumentError("--repeats must be >= 1");
  if (options.end_to_end && (!options.launcher || options.baton_executable.empty())) {
    return absl::InvalidArgumentError("end-to-end runs need a process launcher and the binary");
  }
  absl::StatusOr<std::unique_ptr<engine::Model>> model = engine::Model::Load(options.model_path);
  if (!model.ok()) return model.status();
  const engine::ModelConfig& config = (*model)->config();

  // Every length is run as asked, except that a prompt plus max_tokens must fit the context.
  const int32_t cap = config.n_ctx_train - options.max_tokens;
  std::vector<int32_t> prompts;
  for (int32_t p : options.prompt_tokens) {
    if (p < 1) return absl::InvalidArgumentError("prompt lengths must be >= 1");
    prompts.push_back(std::min(p, cap));
    if (p > cap) {
      log << "bench handoff: " << p << " tokens capped at " << cap << " (context "
          << config.n_ctx_train << " - max_tokens " << options.max_tokens << ")\n";
    }
  }

  log << "bench handoff: pure transfer (" << options.transport << ", " << options.device
      << " to " << options.device << ") on 127.0.0.1, " << options.repeats
      << " repeats per length" << std::endl;
  absl::StatusOr<std::vector<TransferResult>> transfers =
      MeasureTransfers(**model, prompts, options, log);
  if (!transfers.ok()) return transfers.status();
  // The ceiling of any loopback transport here, measured in this run: plain TCP, 1 MiB writes,
  // as many bytes as the longest prompt's push.
  const int64_t ceiling_bytes = std::max<int64_t>(transfers->back().bytes, int64_t{64} << 20);
  absl::StatusOr<double> tcp = MeasureTcpLoopback(ceiling_bytes);
  if (!tcp.ok()) return tcp.status();
  log << absl::StrFormat("bench handoff: plain TCP on 127.0.0.1 (the ceiling): %.2f GB/s\n",
                         *tcp / 1e9);

  std::vector<std::vector<E2eSample>> disaggregated(prompts.size()), colocated(prompts.size());
  nlohmann::json e2e_error;
  if (options.end_to_end) {
    log << "bench handoff: starting a disaggregated and a colocated cluster" << std::endl;
    absl::StatusOr<Cluster> disagg = StartCluster(options, /*colocated=*/false);
    absl::StatusOr<Cluster> coloc =
        disagg.ok() ? StartCluster(options, /*colocated=*/true) : disagg.status();
    if (!disagg.ok() || !coloc.ok()) {
      e2e_error = std::string((disagg.ok() ? coloc.status() : disagg.status()).message());
      log << "bench handoff: end-to-end part skipped: " << e2e_error.get<std::string>() << "\n";
    } else {
      // One small request each first: channels between router and workers, KV streams.
      for (Cluster* c : {&*disagg, &*coloc}) {
        (void)SendTokens(*c, SyntheticTokens(64, config.n_vocab, 7), 2, options.request_timeout);
      }
      for (size_t i = 0; i < prompts.size(); ++i) {
        for (int rep = 0; rep < options.repeats; ++rep) {
          // The same prompt both ways; a fresh one each repeat.
          const std::vector<int32_t> prompt =
              SyntheticTokens(prompts[i], config.n_vocab, i * 1000 + rep);
          // Alternate which goes first, so that neither always follows the other. A way whose
          // request ran out of time is not repeated at this length: it would only fail again.
          for (int way = 0; way < 2; ++way) {
            const bool is_disagg = (way + rep) % 2 == 0;
            std::vector<E2eSample>& samples = is_disagg ? disaggregated[i] : colocated[i];
            if (!samples.empty() && absl::StartsWith(samples.back().error, "DEADLINE_EXCEEDED")) {
              continue;
            }
            samples.push_back(SendTokens(is_disagg ? *disagg : *coloc, prompt,
                                         options.max_tokens, options.request_timeout));
            if (!samples.back().ok) {
              log << "bench handoff: " << prompts[i] << " tokens, "
                  << (is_disagg ? "disaggregated" : "colocated") << ": " << samples.back().error
                  << "\n";
            }
          }
        }
        log << "bench handoff: end to end " << prompts[i] << " tokens done" << std::endl;
      }
    }
  }

  nlohmann::json rows = nlohmann::json::array();
  for (size_t i = 0; i < prompts.size(); ++i) {
    const TransferResult& t = (*transfers)[i];
    const double median_s = Median(t.seconds);
    const double best_s = *std::min_element(t.seconds.begin(), t.seconds.end());
    nlohmann::json row = {
        {"prompt_tokens_requested", options.prompt_tokens[i]},
        {"prompt_tokens", prompts[i]},
        {"kv_bytes", t.bytes},
        {"transfer",
         {{"transport", t.transport},
          {"seconds", t.seconds},
          {"median_ms", median_s * 1e3},
          {"best_ms", best_s * 1e3},
          {"gb_per_s_median", t.bytes / median_s / 1e9},
          {"gb_per_s_best", t.bytes / best_s / 1e9},
          {"of_tcp_loopback", t.bytes / median_s / *tcp}}},
    };
    if (options.end_to_end && e2e_error.is_null()) {
      row["disaggregated"] = E2eJson(disaggregated[i]);
      row["colocated"] = E2eJson(colocated[i]);
      const nlohmann::json& d = row["disaggregated"];
      const nlohmann::json& c = row["colocated"];
      if (!d["ttft_ms_median"].is_null() && !c["ttft_ms_median"].is_null()) {
        const double dt = d["ttft_ms_median"].get<double>();
        const double ct = c["ttft_ms_median"].get<double>();
        row["ttft_ratio_disaggregated_over_colocated"] = dt / ct;
        row["ttft_overhead_ms"] = dt - ct;
      }
    }
    rows.push_back(std::move(row));
  }
  nlohmann::json result = {
      {"model", options.model_path},
      {"n_layer", config.n_layer},
      {"kv_dim", config.kv_dim()},
      {"kv_bytes_per_token", config.kv_bytes_per_token()},
      {"block_size", kBlockSize},
      {"repeats", options.repeats},
      {"max_tokens", options.max_tokens},
      {"device", options.device},
      {"transport", {{"kind", options.transport}, {"chunk_bytes", options.kv_chunk_bytes},
                     {"streams", options.kv_streams}, {"host", "127.0.0.1"}}},
      {"tcp_loopback_gb_per_s", *tcp / 1e9},
      {"disaggregated_setup", "router + prefill worker (1 thread, core 0) + decode worker "
                              "(1 thread, core 1)"},
      {"link", options.link},
      {"colocated_setup", absl::StrCat("router + colocated worker (", options.colocated_threads,
                                       options.colocated_threads == 1 ? " thread, core 0)"
                                                                      : " threads, unpinned)")},
      {"rows", rows},
  };
  if (!options.end_to_end) result["end_to_end"] = "skipped (--no-e2e)";
  if (!e2e_error.is_null()) result["end_to_end_error"] = e2e_error;
  return result;
}

std::string FormatHandoffTable(const nlohmann::json& result) {
  std::string out;
  auto get = [](const nlohmann::json& j, const char* a, const char* b = nullptr) -> double {
    const nlohmann::json* v = &j;
    for (const char* k : {a, b}) {
      if (k == nullptr) break;
      if (!v->is_object() || !v->contains(k)) return std::nan("");
      v = &(*v)[k];
    }
    return v->is_number() ? v->get<double>() : std::nan("");
  };
  absl::StrAppendFormat(&out, "%8s %12s | %10s %8s %6s | %10s %9s | %10s %10s %7s\n",
                        "prompt", "KV bytes", "xfer ms", "GB/s", "/TCP", "P/D KV ms", "P/D GB/s",
                        "TTFT P/D", "TTFT col", "ratio");
  auto cell = [](double v, int width, int precision) {
    return std::isnan(v) ? absl::StrFormat("%*s", width, "-")
                         : absl::StrFormat("%*.*f", width, precision, v);
  };
  std::string notes;
  for (const nlohmann::json& row : result["rows"]) {
    absl::StrAppendFormat(
        &out, "%8d %12d | %s %s %s | %s %s | %s %s %s\n", row.value("prompt_tokens", 0),
        row.value("kv_bytes", int64_t{0}), cell(get(row, "transfer", "median_ms"), 10, 3),
        cell(get(row, "transfer", "gb_per_s_median"), 8, 2),
        cell(get(row, "transfer", "of_tcp_loopback"), 6, 2),
        cell(get(row, "disaggregated", "kv_transfer_ms_median"), 10, 1),
        cell(get(row, "disaggregated", "kv_gb_per_s"), 9, 3),
        cell(get(row, "disaggregated", "ttft_ms_median"), 10, 1),
        cell(get(row, "colocated", "ttft_ms_median"), 10, 1),
        cell(get(row, "ttft_ratio_disaggregated_over_colocated"), 7, 2));
    for (const char* way : {"disaggregated", "colocated"}) {
      if (!row.contains(way)) continue;
      for (const nlohmann::json& e : row[way]["errors"]) {
        absl::StrAppend(&notes, "  ", row.value("prompt_tokens", 0), " tokens, ", way, ": ",
                        e.get<std::string>(), "\n");
      }
    }
  }
  absl::StrAppend(&out,
                  "xfer: pure gRPC KV push into a reservation table (median), /TCP: its share of "
                  "plain TCP on 127.0.0.1 measured in the same run; P/D KV: the hand-off "
                  "inside a real request (push start -> last ack, so it spans the prefill compute "
                  "it overlaps); TTFT (client) in ms, medians; "
                  "ratio = P/D / colocated\n");
  if (!notes.empty()) absl::StrAppend(&out, "failed requests:\n", notes);
  if (result.contains("end_to_end_error")) {
    absl::StrAppend(&out, "end to end not run: ", result["end_to_end_error"].get<std::string>(),
                    "\n");
  }
  return out;
}

}  // namespace baton::bench
