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

int RunWorkerWithRole(const std::string& command, const Args& args,
                      std::optional<baton::v1::WorkerRole> fixed_role) {
  std::vector<FlagSpec> specs = ServeFlagSpecs();
  std::vector<FlagSpec> own = {
      {"model", "PATH", "GGUF model (default: the default model)"},
      {"router", "HOST:PORT", "register with this router and send it heartbeats"},
      {"advertise", "HOST:PORT", "address the router and peers should dial (default host:port)"},
      {"threads", "N", "CPU threads for the model (default: all cores)"},
      {"kv-cache-memory", "BYTES", "KV cache size (default 512 MiB); suffixes K, M, G"},
      {"max-batch-tokens", "N", "prefill: prompt tokens per forward pass; longer prompts are "
                               "prefilled in chunks of this many (default 2048)"},
      {"max-decode-batch", "N", "decode: sequences per step (default 64)"},
      {"kv-reserve-ahead", "N", "decode: generated tokens whose KV is held at admission; later "
                                "ones grow on demand, preempting the youngest sequence when full "
                                "(default 64; -1: all of max_tokens up front)"},
      {"kv-stall-timeout", "SECONDS", "decode: a KV push that sends no chunk for this long is "
                                      "dropped, failing its prefill (default 30)"},
      {"kv-chunk-bytes", "N", "prefill: KV transfer chunk size (default 1 MiB)"},
      {"kv-streams", "N", "prefill: parallel KV transfer streams per request (default 1)"},
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
  options.router_address = flags->GetOr("router", "");
  options.advertise_address = flags->GetOr("advertise", "");
  absl::StatusOr<int64_t> v;
  if (!(v = flags->GetInt("threads", 0, 0, 1024)).ok()) return UsageError(command, v.status(), usage);
  options.n_threads = static_cast<int>(*v);
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
  if (!(v = flags->GetInt("kv-chunk-bytes", 1 << 20, 4096, 1 << 26)).ok()) return UsageError(command, v.status(), usage);
  options.kv_chunk_bytes = *v;
  if (!(v = flags->GetInt("kv-streams", 1, 1, 16)).ok()) return UsageError(command, v.status(), usage);
  options.kv_streams = static_cast<int>(*v);
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
