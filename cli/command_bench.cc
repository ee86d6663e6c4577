// baton bench engine | serve | handoff | products: engine speed (bench/engine_bench.h), a load
// generator against a router (bench/serve_bench.h), the KV hand-off cost
// (bench/handoff_bench.h), the GPU quantized products' sweep (kernels/cuda/product_sweep.h).
#include <signal.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <iostream>
#include <limits>
#include <optional>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "bench/engine_bench.h"
#include "bench/handoff_bench.h"
#include "bench/latency_plot.h"
#include "bench/serve_bench.h"
#include "cli/child_process.h"
#include "cli/command.h"
#include "cli/handoff_link.h"
#include "cli/link_spec.h"
#include "cli/network_namespaces.h"
#include "kernels/device.h"
#if BATON_HAVE_CUDA
#include "kernels/cuda/device_probes.h"
#include "kernels/cuda/product_sweep.h"
#include "kernels/cuda/product_variants.h"
#endif
#include "kvtransfer/kv_transport.h"

namespace baton::cli {
namespace {

int RunBenchEngine(const Args& args) {
  const std::vector<FlagSpec> specs = {
      {"model", "PATH", "GGUF model (default: the default model)"},
      DeviceFlagSpec(),
      {"threads", "N", "CPU threads (default: all cores)"},
      {"tensor-parallel", "N",
       "ranks of tensor parallelism, threads of one process on the CPU sharing --threads "
       "(default 1)"},
      {"tensor-parallel-mode", "MODE",
       "exact (row-parallel outputs gathered: the whole model's bits) or partial-sums "
       "(Megatron-LM's all-reduce) (default exact)"},
      {"prompt-tokens", "N", "prefill prompt length (default 512)"},
      {"decode-tokens", "N", "decode length, one sequence (default 128)"},
      {"decode-context", "N", "tokens in its cache before the first decode step (default 16)"},
      {"batch-sizes", "LIST",
       "batched decode sizes, comma-separated (default 1,8,32; on a GPU 1,8,32,128)"},
      {"repeats", "N", "best of N runs (default 3)"},
      {"json", "", "print only the JSON object (the default output is the same JSON)"},
      {"help", "", "show this help"},
  };
  const std::string usage =
      Usage("bench engine",
            "[--model PATH] [--device DEVICE] [--threads N] [--tensor-parallel N] [--json]",
            specs);
  absl::StatusOr<Flags> flags = Flags::Parse(args, specs);
  if (!flags.ok()) return UsageError("bench engine", flags.status(), usage);
  if (flags->Has("help")) {
    std::cout << usage;
    return 0;
  }
  bench::EngineBenchOptions options;
  options.model_path = flags->GetOr("model", DefaultModelPath());
  absl::StatusOr<kernels::Device> device = DeviceFlag(*flags);
  if (!device.ok()) return UsageError("bench engine", device.status(), usage);
  options.device = *device;
  if (options.device.is_cuda()) options.batch_sizes = {1, 8, 32, 128};
  absl::StatusOr<int64_t> v;
  if (!(v = flags->GetInt("threads", 0, 0, 1024)).ok()) return UsageError("bench engine", v.status(), usage);
  options.n_threads = static_cast<int>(*v);
  if (!(v = flags->GetInt("tensor-parallel", 1, 1, 64)).ok()) return UsageError("bench engine", v.status(), usage);
  options.tensor_parallel = static_cast<int32_t>(*v);
  if (auto mode = flags->Get("tensor-parallel-mode")) {
    if (*mode == "partial-sums") {
      options.tensor_parallel_mode = engine::TensorParallelMode::kPartialSums;
    } else if (*mode != "exact") {
      return UsageError("bench engine",
                        absl::InvalidArgumentError(absl::StrCat(
                            "--tensor-parallel-mode: '", *mode, "', expected exact or partial-sums")),
                        usage);
    }
  }
  if (!(v = flags->GetInt("prompt-tokens", 512, 1, 8192)).ok()) return UsageError("bench engine", v.status(), usage);
  options.prompt_tokens = static_cast<int32_t>(*v);
  if (!(v = flags->GetInt("decode-tokens", 128, 1, 4096)).ok()) return UsageError("bench engine", v.status(), usage);
  options.decode_tokens = static_cast<int32_t>(*v);
  if (!(v = flags->GetInt("decode-context", 16, 1, 8192)).ok()) return UsageError("bench engine", v.status(), usage);
  options.decode_context = static_cast<int32_t>(*v);
  if (!(v = flags->GetInt("repeats", 3, 1, 100)).ok()) return UsageError("bench engine", v.status(), usage);
  options.repeats = static_cast<int>(*v);
  if (auto list = flags->Get("batch-sizes")) {
    options.batch_sizes.clear();
    for (absl::string_view item : absl::StrSplit(*list, ',')) {
      int32_t b;
      if (!absl::SimpleAtoi(item, &b) || b < 1 || b > 256) {
        return UsageError("bench engine",
                          absl::InvalidArgumentError("--batch-sizes: each size in [1, 256]"), usage);
      }
      options.batch_sizes.push_back(b);
    }
    if (options.batch_sizes.empty()) {
      return UsageError("bench engine", absl::InvalidArgumentError("--batch-sizes is empty"), usage);
    }
  }
  absl::StatusOr<nlohmann::json> result = bench::RunEngineBench(options);
  if (!result.ok()) return RunError("bench engine", result.status());
  std::cout << result->dump(2) << "\n";
  return 0;
}

// Writes `json` to `path`, or to stdout when path is empty.
absl::Status EmitJson(const nlohmann::json& json, const std::string& path) {
  if (path.empty()) {
    std::cout << json.dump(2) << "\n" << std::flush;
    return absl::OkStatus();
  }
  std::ofstream out(path, std::ios::trunc);
  out << json.dump(2) << "\n";
  out.close();
  if (!out) return absl::InternalError(absl::StrCat("cannot write ", path));
  return absl::OkStatus();
}

int RunBenchServe(const Args& args) {
  const std::vector<FlagSpec> specs = {
      {"server", "HOST:PORT[,...]", "the router's gRPC address (or its HTTP address with --protocol http); several routers of one cluster: requests go to each in turn"},
      {"protocol", "P", "grpc (default) | http (POST /v1/completions, stream=true)"},
      {"request-rate", "R", "open loop: Poisson arrivals at R requests/s (seeded; inf: all at once)"},
      {"concurrency", "C", "closed loop: C requests in flight"},
      {"max-concurrency", "N", "open loop: at most N requests in flight (default 1024)"},
      {"num-prompts", "N", "measured requests (default 100)"},
      {"warmup", "W", "unmeasured requests sent first (default 0)"},
      {"input-len", "L", "synthetic prompts: tokens (default 256)"},
      {"output-len", "O", "output tokens per request (default 64; a dataset's default)"},
      {"range-ratio", "X", "lengths uniform in [len*(1-X), len*(1+X)] (default 0)"},
      {"dataset", "FILE", "JSONL, one {\"prompt\": ..., \"max_tokens\": ...} per line"},
      {"conversations", "N", "multi-turn: N synthetic conversations (--concurrency of them in "
                             "flight, their turns one after the other), instead of --num-prompts"},
      {"turns", "T", "multi-turn: turns per conversation (default 4)"},
      {"phases", "IN:OUT:N[:RATE],...", "a mix that shifts: N synthetic requests of IN prompt "
                                        "and OUT answer tokens at RATE requests/s (default "
                                        "--request-rate), then the next phase; replaces "
                                        "--num-prompts and the lengths; per-phase metrics"},
      {"system-prompt-len", "S", "multi-turn: tokens of the system prompt all conversations "
                                 "share (default 1024)"},
      {"turn-len", "U", "multi-turn: user tokens each turn adds (default 64); each answer has "
                        "--output-len tokens"},
      {"slo-ttft-ms", "X", "goodput: TTFT at most X ms"},
      {"slo-tpot-ms", "Y", "goodput: TPOT at most Y ms"},
      {"seed", "S", "seed of prompts, lengths and arrivals (default 0)"},
      {"request-timeout", "SECONDS", "deadline of each request (default 300)"},
      {"token", "T", "shared token (authorization: Bearer T)"},
      {"model", "NAME", "model name to send (default: none, the served one)"},
      {"json", "OUT.json", "write the JSON result there (default: stdout)"},
      {"plot", "OUT.png", "latency CDFs drawn by gnuplot (also writes OUT.dat, OUT.gp)"},
      {"no-per-request", "", "leave the per-request arrays out of the JSON"},
      {"no-speculation", "", "opt every request out of speculative decoding (the baseline "
                             "beside a speculating decode worker)"},
      {"temperature", "T", "sampling temperature of every request (default 0: greedy); other "
                           "parameters as the API's defaults (top_p 1)"},
      {"stop-at-eos", "", "let each request end at the model's end of generation, as real "
                          "requests do (default: exactly max_tokens each)"},
      {"json-schema", "FILE", "structured output: every request's output follows the JSON "
                              "schema in FILE (ends where the JSON does); the report's "
                              "structured_output gives the masks' cost per token"},
      {"help", "", "show this help"},
  };
  const std::string usage = Usage(
      "bench serve",
      "--server HOST:PORT (--request-rate R | --concurrency C) [--num-prompts N] [flags]", specs);
  absl::StatusOr<Flags> flags = Flags::Parse(args, specs);
  if (!flags.ok()) return UsageError("bench serve", flags.status(), usage);
  if (flags->Has("help")) {
    std::cout << usage;
    return 0;
  }
  auto bad = [&](const absl::Status& s) { return UsageError("bench serve", s, usage); };
  bench::ServeBenchOptions o;
  o.client.server = flags->GetOr("server", "");
  if (o.client.server.empty()) return bad(absl::InvalidArgumentError("--server is required"));
  absl::StatusOr<bench::ServeProtocol> protocol =
      bench::ParseServeProtocol(flags->GetOr("protocol", "grpc"));
  if (!protocol.ok()) return bad(protocol.status());
  o.client.protocol = *protocol;
  o.client.token = flags->GetOr("token", "");
  o.client.model = flags->GetOr("model", "");
  if (auto rate = flags->Get("request-rate")) {
    if (*rate == "inf") {
      o.request_rate = std::numeric_limits<double>::infinity();
    } else {
      absl::StatusOr<double> r = flags->GetDouble("request-rate", 0, 1e-6, 1e6);
      if (!r.ok()) return bad(r.status());
      o.request_rate = *r;
    }
  }
  absl::StatusOr<int64_t> v;
  if (!(v = flags->GetInt("concurrency", 0, 1, 100000)).ok()) return bad(v.status());
  o.concurrency = static_cast<int32_t>(*v);
  if (auto phases = flags->Get("phases")) {
    absl::StatusOr<std::vector<bench::LoadPhase>> parsed =
        bench::ParseLoadPhases(*phases, o.request_rate);
    if (!parsed.ok()) return bad(parsed.status());
    o.phases = *std::move(parsed);
  } else if ((o.request_rate > 0) == (o.concurrency > 0)) {
    return bad(absl::InvalidArgumentError("give exactly one of --request-rate and --concurrency"));
  }
  if (!(v = flags->GetInt("max-concurrency", 1024, 1, 100000)).ok()) return bad(v.status());
  o.max_in_flight = static_cast<int32_t>(*v);
  if (!(v = flags->GetInt("num-prompts", 100, 1, 1000000)).ok()) return bad(v.status());
  o.num_prompts = static_cast<int32_t>(*v);
  if (!(v = flags->GetInt("warmup", 0, 0, 100000)).ok()) return bad(v.status());
  o.warmup = static_cast<int32_t>(*v);
  if (!(v = flags->GetInt("input-len", 256, 1, 1 << 20)).ok()) return bad(v.status());
  o.input_len = static_cast<int32_t>(*v);
  if (!(v = flags->GetInt("output-len", 64, 1, 1 << 20)).ok()) return bad(v.status());
  o.output_len = static_cast<int32_t>(*v);
  absl::StatusOr<double> d;
  if (!(d = flags->GetDouble("range-ratio", 0, 0, 0.999)).ok()) return bad(d.status());
  o.range_ratio = *d;
  o.dataset_path = flags->GetOr("dataset", "");
  if (!(v = flags->GetInt("conversations", 0, 1, 1000000)).ok()) return bad(v.status());
  o.conversations = static_cast<int32_t>(*v);
  if (!(v = flags->GetInt("turns", 4, 1, 1000)).ok()) return bad(v.status());
  o.turns = static_cast<int32_t>(*v);
  if (!(v = flags->GetInt("system-prompt-len", 1024, 1, 1 << 20)).ok()) return bad(v.status());
  o.system_prompt_len = static_cast<int32_t>(*v);
  if (!(v = flags->GetInt("turn-len", 64, 1, 1 << 20)).ok()) return bad(v.status());
  o.turn_len = static_cast<int32_t>(*v);
  if (o.conversations > 0 && !o.dataset_path.empty()) {
    return bad(absl::InvalidArgumentError("--conversations and --dataset exclude each other"));
  }
  if (flags->Has("slo-ttft-ms")) {
    if (!(d = flags->GetDouble("slo-ttft-ms", 0, 0, 1e9)).ok()) return bad(d.status());
    o.slo.ttft_s = *d / 1e3;
  }
  if (flags->Has("slo-tpot-ms")) {
    if (!(d = flags->GetDouble("slo-tpot-ms", 0, 0, 1e9)).ok()) return bad(d.status());
    o.slo.tpot_s = *d / 1e3;
  }
  if (!(v = flags->GetInt("seed", 0, 0, std::numeric_limits<int64_t>::max())).ok()) {
    return bad(v.status());
  }
  o.seed = static_cast<uint64_t>(*v);
  if (!(v = flags->GetInt("request-timeout", 300, 1, 86400)).ok()) return bad(v.status());
  o.client.timeout = std::chrono::seconds(*v);
  o.keep_requests = !flags->Has("no-per-request");
  o.client.speculative = !flags->Has("no-speculation");
  o.client.ignore_eos = !flags->Has("stop-at-eos");
  if (flags->Has("json-schema")) {
    std::ifstream in(flags->GetOr("json-schema", ""));
    if (!in) {
      return bad(absl::InvalidArgumentError(
          absl::StrCat("--json-schema: cannot read ", flags->GetOr("json-schema", ""))));
    }
    o.client.json_schema.assign(std::istreambuf_iterator<char>(in), {});
  }
  absl::StatusOr<double> temperature = flags->GetDouble("temperature", 0, 0, 2);
  if (!temperature.ok()) return bad(temperature.status());
  o.client.temperature = static_cast<float>(*temperature);

  absl::StatusOr<bench::ServeBenchResult> result = bench::RunServeBench(o, std::cerr);
  if (!result.ok()) return RunError("bench serve", result.status());
  std::cerr << bench::FormatServeTable(result->json);
  if (auto plot = flags->Get("plot")) {
    const std::string title = absl::StrCat(
        "baton bench serve: ", bench::ServeProtocolName(o.client.protocol), " ", o.client.server,
        o.request_rate > 0 ? absl::StrCat(", ", result->json["request_rate"].dump(), " req/s")
                           : absl::StrCat(", ", o.concurrency, " in flight"),
        ", ", result->json.value("completed", 0), " requests");
    absl::Status plotted = bench::WriteLatencyPlot(result->outcomes, *plot, title);
    if (plotted.ok()) {
      std::cerr << "baton bench serve: plot written to " << *plot << "\n";
    } else {
      std::cerr << "baton bench serve: no plot: " << plotted.message() << "\n";
    }
    result->json["plot"] = plotted.ok() ? nlohmann::json(*plot) : nlohmann::json();
  }
  if (absl::Status s = EmitJson(result->json, flags->GetOr("json", "")); !s.ok()) {
    return RunError("bench serve", s);
  }
  return 0;
}

// bench::BenchProcess over a ChildProcess: SIGTERM on destruction, SIGKILL after a grace.
class ChildBenchProcess final : public bench::BenchProcess {
 public:
  explicit ChildBenchProcess(std::unique_ptr<ChildProcess> process)
      : process_(std::move(process)) {}
  ~ChildBenchProcess() override {
    process_->Signal(SIGTERM);
    if (!process_->Wait(std::chrono::seconds(10)).ok()) process_->Signal(SIGKILL);
  }
  absl::StatusOr<std::string> WaitForLine(const std::string& prefix,
                                          std::chrono::milliseconds timeout) override {
    return process_->WaitForLine(prefix, timeout);
  }

 private:
  std::unique_ptr<ChildProcess> process_;
};

// One `bench handoff` run; with a `link` (not ""), its disaggregated cluster across that link.
absl::StatusOr<nlohmann::json> RunHandoffOverLink(bench::HandoffBenchOptions options,
                                                  const std::string& link) {
  std::unique_ptr<PdNamespaces> namespaces;  // outlives the run's processes
  if (!link.empty() && options.end_to_end) {
    absl::StatusOr<LinkSpec> spec = ParseLinkSpec(link, "--link");
    if (!spec.ok()) return spec.status();
    absl::StatusOr<std::unique_ptr<PdNamespaces>> made = PdNamespaces::Create(*spec);
    if (!made.ok()) return made.status();
    namespaces = *std::move(made);
    PlaceAcrossLink(*namespaces, link, options);
  }
  return bench::RunHandoffBench(options, std::cerr);
}

int RunBenchHandoff(const Args& args) {
  const std::vector<FlagSpec> specs = {
      {"model", "PATH", "GGUF model (default: the default model)"},
      {"prompt-tokens", "LIST", "prompt lengths, comma-separated (default 128,512,2048,8192)"},
      {"repeats", "N", "runs per length and way, medians reported (default 3)"},
      {"max-tokens", "N", "end-to-end requests' output tokens (default 16); prompts are capped "
                          "at the context minus this"},
      {"kv-chunk-bytes", "N", "gRPC KV transfer chunk size (default 1 MiB, as the workers)"},
      {"kv-streams", "N", "parallel KV streams per push (default 1, as the workers)"},
      {"device", "DEV", "where both ends' KV caches live: cpu or cuda[:N] (default cpu)"},
      {"transport", "T", "how KV travels: grpc (default), nccl (between GPUs), or auto"},
      {"kv-cache-memory", "BYTES", "each worker's KV cache (default 512M)"},
      {"colocated-threads", "N", "the colocated worker's threads (default 1: the prefill "
                                 "worker's compute, so the TTFT ratio isolates the hand-off)"},
      {"no-e2e", "", "the pure transfer only: start no processes"},
      {"link", "RATE[,DELAY]", "the disaggregated cluster's prefill and decode worker in network "
                               "namespaces of their own, joined by this emulated link (needs "
                               "root; as `baton up --link`)"},
      {"link-sweep", "R1,R2,...", "one run per link rate (e.g. 1gbit,10gbit,25gbit,100gbit), "
                                  "each with its own colocated baseline"},
      {"json", "OUT.json", "write the JSON result there (default: stdout)"},
      {"help", "", "show this help"},
  };
  const std::string usage = Usage("bench handoff", "[--model PATH] [--prompt-tokens LIST] "
                                                   "[--repeats N] [--json OUT.json]", specs);
  absl::StatusOr<Flags> flags = Flags::Parse(args, specs);
  if (!flags.ok()) return UsageError("bench handoff", flags.status(), usage);
  if (flags->Has("help")) {
    std::cout << usage;
    return 0;
  }
  auto bad = [&](const absl::Status& s) { return UsageError("bench handoff", s, usage); };
  bench::HandoffBenchOptions o;
  o.model_path = flags->GetOr("model", DefaultModelPath());
  if (auto list = flags->Get("prompt-tokens")) {
    o.prompt_tokens.clear();
    for (absl::string_view item : absl::StrSplit(*list, ',')) {
      int32_t n;
      if (!absl::SimpleAtoi(item, &n) || n < 1 || n > (1 << 20)) {
        return bad(absl::InvalidArgumentError(
            absl::StrCat("--prompt-tokens: '", item, "' is not a length in [1, 1048576]")));
      }
      o.prompt_tokens.push_back(n);
    }
  }
  absl::StatusOr<int64_t> v;
  if (!(v = flags->GetInt("repeats", 3, 1, 1000)).ok()) return bad(v.status());
  o.repeats = static_cast<int>(*v);
  if (!(v = flags->GetInt("max-tokens", 16, 1, 4096)).ok()) return bad(v.status());
  o.max_tokens = static_cast<int32_t>(*v);
  if (!(v = flags->GetInt("kv-chunk-bytes", 1 << 20, 4096, 256 << 20)).ok()) return bad(v.status());
  o.kv_chunk_bytes = *v;
  if (!(v = flags->GetInt("kv-streams", 1, 1, 64)).ok()) return bad(v.status());
  o.kv_streams = static_cast<int>(*v);
  o.device = flags->GetOr("device", "cpu");
  if (absl::StatusOr<kernels::Device> device = kernels::ParseDevice(o.device); !device.ok()) {
    return bad(device.status());
  }
  o.transport = flags->GetOr("transport", "grpc");
  if (auto choice = kvtransfer::ParseKvTransportChoice(o.transport); !choice.ok()) {
    return bad(choice.status());
  }
  if (!(v = flags->GetInt("colocated-threads", 1, 1, 1024)).ok()) return bad(v.status());
  o.colocated_threads = static_cast<int>(*v);
  o.kv_cache_memory = flags->GetOr("kv-cache-memory", "512M");
  if (absl::StatusOr<int64_t> bytes = ParseByteSize(o.kv_cache_memory); !bytes.ok()) {
    return bad(bytes.status());
  }
  o.end_to_end = !flags->Has("no-e2e");
  o.baton_executable = SelfExecutable();
  o.launcher = [](const std::vector<std::string>& argv, const std::vector<int>& cpus)
      -> absl::StatusOr<std::unique_ptr<bench::BenchProcess>> {
    absl::StatusOr<std::unique_ptr<ChildProcess>> p = ChildProcess::Start(argv, cpus);
    if (!p.ok()) return p.status();
    return std::make_unique<ChildBenchProcess>(std::move(*p));
  };
  std::vector<std::string> links = {""};  // "": loopback
  if (flags->Has("link") && flags->Has("link-sweep")) {
    return bad(absl::InvalidArgumentError("give --link or --link-sweep, not both"));
  }
  if (auto link = flags->Get("link")) {
    if (absl::StatusOr<LinkSpec> spec = ParseLinkSpec(*link, "--link"); !spec.ok()) {
      return bad(spec.status());
    }
    links = {*link};
  } else if (auto sweep = flags->Get("link-sweep")) {
    absl::StatusOr<std::vector<std::string>> parsed = ParseLinkSweep(*sweep);
    if (!parsed.ok()) return bad(parsed.status());
    links = *std::move(parsed);
  }
  if (!links.front().empty() && o.end_to_end) {
    if (absl::Status s = NetworkNamespacesAvailable(); !s.ok()) return bad(s);
  }
  nlohmann::json results = nlohmann::json::array();
  for (const std::string& link : links) {
    absl::StatusOr<nlohmann::json> result = RunHandoffOverLink(o, link);
    if (!result.ok()) return RunError("bench handoff", result.status());
    std::cerr << "link: " << result->value("link", "loopback") << "\n"
              << bench::FormatHandoffTable(*result);
    results.push_back(*std::move(result));
  }
  const nlohmann::json out = results.size() == 1 ? results[0] : nlohmann::json{{"links", results}};
  if (absl::Status s = EmitJson(out, flags->GetOr("json", "")); !s.ok()) {
    return RunError("bench handoff", s);
  }
  return 0;
}

#if BATON_HAVE_CUDA
// --types of bench products: names among kQuantizedMatVecTypes (any case), all of them when unset.
absl::Status ParseProductTypes(const std::optional<std::string>& list,
                              std::vector<kernels::DType>* dtypes) {
  const auto& types = kernels::cuda::kQuantizedMatVecTypes;
  if (!list.has_value()) {
    dtypes->assign(types.begin(), types.end());
    return absl::OkStatus();
  }
  for (absl::string_view name : absl::StrSplit(*list, ',')) {
    const auto it = std::find_if(types.begin(), types.end(), [&](kernels::DType t) {
      return absl::AsciiStrToLower(std::string(kernels::DTypeName(t))) ==
             absl::AsciiStrToLower(std::string(name));
    });
    if (it == types.end()) {
      std::string known;
      for (const kernels::DType t : types) {
        absl::StrAppend(&known, known.empty() ? "" : ", ", std::string(kernels::DTypeName(t)));
      }
      return absl::InvalidArgumentError(
          absl::StrCat("--types: '", name, "' is not one of ", known));
    }
    dtypes->push_back(*it);
  }
  return absl::OkStatus();
}
#endif

// baton bench products: the quantized products' sweep on a GPU (kernels/cuda/product_sweep.h):
// every variant against the CPU reference and timed, the fastest correct per shape class
// chosen, the table printed as markdown and as product_variants.cc's entries. Exit 1 when a
// class has no correct variant.
int RunBenchProducts(const Args& args) {
  const std::vector<FlagSpec> specs = {
      DeviceFlagSpec(),
      {"types", "LIST", "weight types, comma-separated (default: every type with the kernels)"},
      {"models", "LIST", "shapes of llama-3-8b, smollm2-135m (default both)"},
      {"rows", "LIST", "activation-row counts, 1 to 8192 (default 1,2,4,8,16,32,64,128,256)"},
      {"repeats", "N", "calls timed per measurement (default 20)"},
      {"help", "", "show this help"},
  };
  const std::string usage = Usage("bench products", "--device cuda[:N] [--types LIST]", specs);
  absl::StatusOr<Flags> flags = Flags::Parse(args, specs);
  if (!flags.ok()) return UsageError("bench products", flags.status(), usage);
  if (flags->Has("help")) {
    std::cout << usage;
    return 0;
  }
  absl::StatusOr<kernels::Device> device = DeviceFlag(*flags);
  if (!device.ok()) return UsageError("bench products", device.status(), usage);
  if (!device->is_cuda()) {
    return UsageError("bench products", absl::InvalidArgumentError("needs --device cuda[:N]"),
                      usage);
  }
#if BATON_HAVE_CUDA
  namespace cuda = kernels::cuda;
  cuda::ProductSweepOptions options{.device = device->index};
  if (absl::Status s = ParseProductTypes(flags->Get("types"), &options.dtypes); !s.ok()) {
    return UsageError("bench products", s, usage);
  }
  const std::string models = flags->GetOr("models", "llama-3-8b,smollm2-135m");
  for (absl::string_view model : absl::StrSplit(models, ',')) {
    std::vector<cuda::ProductSweepShape> shapes;
    if (model == "llama-3-8b") {
      shapes = cuda::Llama3_8bProductShapes();
    } else if (model == "smollm2-135m") {
      shapes = cuda::SmolLm2ProductShapes();
    } else {
      return UsageError("bench products", absl::InvalidArgumentError(absl::StrCat(
          "--models: '", model, "' is not llama-3-8b or smollm2-135m")), usage);
    }
    options.shapes.insert(options.shapes.end(), shapes.begin(), shapes.end());
  }
  options.batch_rows.clear();
  for (absl::string_view row : absl::StrSplit(flags->GetOr("rows", "1,2,4,8,16,32,64,128,256"),
                                              ',')) {
    int64_t n = 0;
    if (!absl::SimpleAtoi(row, &n) || n < 1 || n > cuda::kProductRowBuckets.back()) {
      return UsageError("bench products", absl::InvalidArgumentError(absl::StrCat(
          "--rows: '", row, "' is not a count from 1 to ", cuda::kProductRowBuckets.back())),
          usage);
    }
    options.batch_rows.push_back(n);
  }
  absl::StatusOr<int64_t> repeats = flags->GetInt("repeats", 20, 1, 1000);
  if (!repeats.ok()) return UsageError("bench products", repeats.status(), usage);
  options.repeats = static_cast<int>(*repeats);
  absl::StatusOr<double> bandwidth = cuda::MeasureCopyBandwidth(device->index);
  if (!bandwidth.ok()) return RunError("bench products", bandwidth.status());
  absl::StatusOr<std::vector<cuda::ProductMeasurement>> measured = cuda::RunProductSweep(options);
  if (!measured.ok()) return RunError("bench products", measured.status());
  const std::vector<cuda::ProductChoice> chosen = cuda::ChooseFastestCorrect(*measured);
  std::cout << "copy bandwidth: " << *bandwidth / 1e9 << " GB/s (read plus written)\n\n"
            << cuda::FormatSweepMarkdown(*measured, chosen, *bandwidth) << "\ntable:\n"
            << cuda::FormatTableSource(chosen);
  const std::vector<std::string> failed = cuda::ClassesWithoutACorrectVariant(*measured);
  for (const std::string& c : failed) std::cout << "NO CORRECT VARIANT: " << c << "\n";
  return failed.empty() ? 0 : 1;
#else
  return RunError("bench products", absl::UnavailableError("this build has no CUDA backend"));
#endif
}

}  // namespace

int RunBench(const Args& args) {
  constexpr char kUsage[] =
      "usage: baton bench engine|serve|handoff|products [flags]   (baton bench NAME --help)\n";
  if (args.empty()) {
    std::cerr << kUsage;
    return 2;
  }
  if (args[0] == "engine") return RunBenchEngine(Args(args.begin() + 1, args.end()));
  if (args[0] == "serve") return RunBenchServe(Args(args.begin() + 1, args.end()));
  if (args[0] == "handoff") return RunBenchHandoff(Args(args.begin() + 1, args.end()));
  if (args[0] == "products") return RunBenchProducts(Args(args.begin() + 1, args.end()));
  std::cerr << "baton bench: unknown benchmark '" << args[0] << "'\n" << kUsage;
  return 2;
}

}  // namespace baton::cli
