// baton bench engine: engine speed as one JSON object (see bench/engine_bench.h).
#include <iostream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "bench/engine_bench.h"
#include "cli/command.h"

namespace baton::cli {
namespace {

int RunBenchEngine(const Args& args) {
  const std::vector<FlagSpec> specs = {
      {"model", "PATH", "GGUF model (default: the default model)"},
      {"threads", "N", "CPU threads (default: all cores)"},
      {"prompt-tokens", "N", "prefill prompt length (default 512)"},
      {"decode-tokens", "N", "decode length, one sequence (default 128)"},
      {"batch-sizes", "LIST", "batched decode sizes, comma-separated (default 1,8,32)"},
      {"repeats", "N", "best of N runs (default 3)"},
      {"json", "", "print only the JSON object (the default output is the same JSON)"},
      {"help", "", "show this help"},
  };
  const std::string usage = Usage("bench engine", "[--model PATH] [--threads N] [--json]", specs);
  absl::StatusOr<Flags> flags = Flags::Parse(args, specs);
  if (!flags.ok()) return UsageError("bench engine", flags.status(), usage);
  if (flags->Has("help")) {
    std::cout << usage;
    return 0;
  }
  bench::EngineBenchOptions options;
  options.model_path = flags->GetOr("model", DefaultModelPath());
  absl::StatusOr<int64_t> v;
  if (!(v = flags->GetInt("threads", 0, 0, 1024)).ok()) return UsageError("bench engine", v.status(), usage);
  options.n_threads = static_cast<int>(*v);
  if (!(v = flags->GetInt("prompt-tokens", 512, 1, 8192)).ok()) return UsageError("bench engine", v.status(), usage);
  options.prompt_tokens = static_cast<int32_t>(*v);
  if (!(v = flags->GetInt("decode-tokens", 128, 1, 4096)).ok()) return UsageError("bench engine", v.status(), usage);
  options.decode_tokens = static_cast<int32_t>(*v);
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

}  // namespace

int RunBench(const Args& args) {
  constexpr char kUsage[] = "usage: baton bench engine [flags]   (baton bench engine --help)\n";
  if (args.empty()) {
    std::cerr << kUsage;
    return 2;
  }
  if (args[0] == "engine") return RunBenchEngine(Args(args.begin() + 1, args.end()));
  std::cerr << "baton bench: unknown benchmark '" << args[0] << "'\n" << kUsage;
  return 2;
}

}  // namespace baton::cli
