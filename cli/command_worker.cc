// baton prefill | decode | worker --role ROLE: one worker process.
#include <iostream>
#include <optional>

#include "absl/strings/str_cat.h"
#include "base/log.h"
#include "cli/command.h"
#include "cli/serve_flags.h"
#include "worker/worker_server.h"

namespace baton::cli {
namespace {

// --speculative ngram | draft:PATH (unset: off).
absl::Status ParseSpeculativeFlags(const Flags& flags, worker::SpeculativeOptions& options) {
  using Method = worker::SpeculativeOptions::Method;
  const std::string method = flags.GetOr("speculative", "");
  if (method == "ngram") {
    options.method = Method::kNgram;
  } else if (method.rfind("draft:", 0) == 0 && method.size() > 6) {
    options.method = Method::kDraft;
    options.draft_model_path = method.substr(6);
  } else if (!method.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--speculative: '", method, "' is neither 'ngram' nor 'draft:PATH'"));
  }
  absl::StatusOr<int64_t> v = flags.GetInt("num-speculative-tokens", 4, 1, 64);
  if (!v.ok()) return v.status();
  options.num_speculative_tokens = static_cast<int32_t>(*v);
  if (!(v = flags.GetInt("speculative-disable-batch-size", 4, 1, 4096)).ok()) return v.status();
  options.disable_batch_size = static_cast<int32_t>(*v);
  absl::StatusOr<int64_t> bytes = ParseByteSize(flags.GetOr("draft-kv-cache-memory", "64M"));
  if (!bytes.ok()) return bytes.status();
  options.draft_kv_cache_bytes = *bytes;
  if (flags.Has("speculative-token-cost")) {
    absl::StatusOr<double> cost = flags.GetDouble("speculative-token-cost", 0, 0, 100);
    if (!cost.ok()) return cost.status();
    options.token_cost = *cost;
  }
  return absl::OkStatus();
}

int RunWorkerWithRole(const std::string& command, const Args& args,
                      std::optional<baton::v1::WorkerRole> fixed_role) {
  std::vector<FlagSpec> specs = ServeFlagSpecs();
  std::vector<FlagSpec> own = {
      {"model", "PATH", "GGUF file or Hugging Face checkpoint directory (default: the default model)"},
      {"router", "SPEC",
       "register with these routers and send them heartbeats: HOST:PORT[,HOST:PORT...], "
       "dns:NAME:PORT for every address NAME resolves to, or k8s:SERVICE[.NAMESPACE]:PORT for a "
       "Kubernetes Service's ready endpoints (both re-resolved every 5 s)"},
      {"advertise", "HOST:PORT", "address the router and peers should dial (default host:port)"},
      DeviceFlagSpec(),
      QuantizeFlagSpec(),
      {"threads", "N", "CPU threads for the model (default: all cores)"},
      {"tensor-parallel", "N",
       "run the model as N tensor-parallel ranks, threads sharing --threads (CPU; default 1)"},
      {"kv-cache-memory", "BYTES", "KV cache size (default 512 MiB); suffixes K, M, G"},
      {"max-batch-tokens", "N", "prefill: prompt tokens per forward pass; longer prompts are "
                               "prefilled in chunks of this many (default 2048)"},
      {"max-decode-batch", "N", "decode: sequences per step (default 64)"},
      {"kv-reserve-ahead", "N", "decode: generated tokens whose KV is held at admission; later "
                                "ones grow on demand, preempting the youngest sequence when full "
                                "(default 64; -1: all of max_tokens up front)"},
      {"kv-stall-timeout", "SECONDS", "decode: a KV push that sends no chunk for this long is "
                                      "dropped, failing its prefill (default 30)"},
      {"speculative", "METHOD", "decode: speculative decoding, 'ngram' (prompt lookup) or "
                                "'draft:PATH' (a GGUF with the same vocabulary); default off"},
      {"num-speculative-tokens", "K", "decode: tokens proposed per sequence and step at most; "
                                      "fewer where they are rarely accepted (default 4)"},
      {"speculative-disable-batch-size", "N", "decode: steps with more sequences than this "
                                              "decode plainly (default 4)"},
      {"draft-kv-cache-memory", "BYTES", "decode: the draft model's KV cache (default 64M)"},
      {"speculative-token-cost", "C", "decode: one proposed token's cost relative to a decode "
                                      "step, which sets how far speculation goes (default: "
                                      "learned from the batch's step times, plus the draft's "
                                      "share of the weight bytes)"},
      {"no-prefix-caching", "", "keep no KV of finished prompts and sequences for later requests "
                                "with the same prefix (default: kept, evicted least recently "
                                "used first when room is needed)"},
      {"prefix-cache-advertise", "N", "cached block hashes sent to the router per heartbeat at "
                                      "most (default 4096, 8 bytes each)"},
      {"kv-chunk-bytes", "N", "prefill: KV transfer chunk size (default 1 MiB)"},
      {"kv-streams", "N", "prefill: parallel KV transfer streams per request (default 1)"},
      {"kv-transport", "T", "prefill: how KV travels to decode workers: auto (NCCL between "
                            "GPUs where both ends have it, else gRPC), grpc, or nccl (default "
                            "auto)"},
      {"metrics-port", "PORT", "serve Prometheus GET /metrics over HTTP here (0: any free port)"},
      {"metrics-host", "HOST", "address for --metrics-port (default 127.0.0.1)"},
      {"help", "", "show this help"},
  };
  if (!fixed_role) own.push_back({"role", "ROLE", "prefill | decode | both (default both)"});
  specs.insert(specs.end(), own.begin(), own.end());
  const std::string usage = Usage(command, "[flags]", specs);
  absl::StatusOr<Flags> flags = Flags::Parse(args, specs);
  if (!flags.ok()) return UsageError(command, flags.status(), usage);
  if (flags->Has("help")) {
    std::cout << usage;
    return 0;
  }
  worker::WorkerOptions options;
  if (fixed_role) {
    options.role = *fixed_role;
  } else {
    const std::string role = flags->GetOr("role", "both");
    if (role == "prefill") {
      options.role = baton::v1::WORKER_ROLE_PREFILL;
    } else if (role == "decode") {
      options.role = baton::v1::WORKER_ROLE_DECODE;
    } else if (role == "both") {
      options.role = baton::v1::WORKER_ROLE_BOTH;
    } else {
      return UsageError(command,
                        absl::InvalidArgumentError(absl::StrCat(
                            "--role: '", role, "' is not one of prefill, decode, both")),
                        usage);
    }
  }
  if (absl::Status s = ParseServeFlags(*flags, options.server, options.peers); !s.ok()) {
    return UsageError(command, s, usage);
  }
  options.model_path = flags->GetOr("model", DefaultModelPath());
  absl::StatusOr<engine::LoadOptions> load = LoadOptionsFlag(*flags);
  if (!load.ok()) return UsageError(command, load.status(), usage);
  options.load = *load;
  options.routers = flags->GetOr("router", "");
  options.advertise_address = flags->GetOr("advertise", "");
  absl::StatusOr<int64_t> v;
  if (!(v = flags->GetInt("threads", 0, 0, 1024)).ok()) return UsageError(command, v.status(), usage);
  options.n_threads = static_cast<int>(*v);
  if (!(v = flags->GetInt("tensor-parallel", 1, 1, 64)).ok()) return UsageError(command, v.status(), usage);
  options.tensor_parallel = static_cast<int32_t>(*v);
  absl::StatusOr<kernels::Device> device = DeviceFlag(*flags);
  if (!device.ok()) return UsageError(command, device.status(), usage);
  options.device = *device;
  absl::StatusOr<int64_t> bytes = ParseByteSize(flags->GetOr("kv-cache-memory", "512M"));
  if (!bytes.ok()) return UsageError(command, bytes.status(), usage);
  options.kv_cache_bytes = *bytes;
  if (!(v = flags->GetInt("max-batch-tokens", 2048, 1, 1 << 20)).ok()) return UsageError(command, v.status(), usage);
  options.max_batch_tokens = static_cast<int32_t>(*v);
  if (!(v = flags->GetInt("max-decode-batch", 64, 1, 4096)).ok()) return UsageError(command, v.status(), usage);
  options.max_decode_batch = static_cast<int32_t>(*v);
  if (!(v = flags->GetInt("kv-reserve-ahead", engine::kDefaultReserveAheadTokens, -1, 1 << 20)).ok()) return UsageError(command, v.status(), usage);
  options.kv_reserve_ahead = static_cast<int32_t>(*v);
  if (!(v = flags->GetInt("kv-stall-timeout", 30, 1, 3600)).ok()) return UsageError(command, v.status(), usage);
  options.kv_stall_timeout = std::chrono::seconds(*v);
  if (absl::Status s = ParseSpeculativeFlags(*flags, options.speculative); !s.ok()) {
    return UsageError(command, s, usage);
  }
  options.prefix_caching = !flags->Has("no-prefix-caching");
  if (!(v = flags->GetInt("prefix-cache-advertise", 4096, 0, 1 << 20)).ok()) return UsageError(command, v.status(), usage);
  options.prefix_cache_advertise = static_cast<int32_t>(*v);
  if (!(v = flags->GetInt("kv-chunk-bytes", 1 << 20, 4096, 1 << 26)).ok()) return UsageError(command, v.status(), usage);
  options.kv_chunk_bytes = *v;
  if (!(v = flags->GetInt("kv-streams", 1, 1, 16)).ok()) return UsageError(command, v.status(), usage);
  options.kv_streams = static_cast<int>(*v);
  absl::StatusOr<kvtransfer::KvTransportChoice> transport =
      kvtransfer::ParseKvTransportChoice(flags->GetOr("kv-transport", "auto"));
  if (!transport.ok()) return UsageError(command, transport.status(), usage);
  options.kv_transport = *transport;
  if (flags->Has("metrics-port")) {
    if (!(v = flags->GetInt("metrics-port", 0, 0, 65535)).ok()) return UsageError(command, v.status(), usage);
    options.metrics_port = static_cast<int>(*v);
  }
  options.metrics_host = flags->GetOr("metrics-host", "127.0.0.1");

  BlockShutdownSignals();
  absl::StatusOr<std::unique_ptr<worker::WorkerServer>> server =
      worker::WorkerServer::Start(options);
  if (!server.ok()) return RunError(command, server.status());
  std::cout << "listening on " << (*server)->address() << std::endl;
  if (!(*server)->metrics_address().empty()) {
    std::cout << "metrics listening on " << (*server)->metrics_address() << std::endl;
  }
  const int signal = WaitForShutdownSignal();
  BATON_LOG(INFO) << "signal " << signal << ", draining";
  (*server)->Shutdown();
  return 0;
}

}  // namespace

int RunWorker(const Args& args) { return RunWorkerWithRole("worker", args, std::nullopt); }
int RunPrefill(const Args& args) {
  return RunWorkerWithRole("prefill", args, baton::v1::WORKER_ROLE_PREFILL);
}
int RunDecode(const Args& args) {
  return RunWorkerWithRole("decode", args, baton::v1::WORKER_ROLE_DECODE);
}

}  // namespace baton::cli
