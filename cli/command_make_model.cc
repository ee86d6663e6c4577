// baton make-model --out PATH [--shape NAME] [--type TYPE] [--layers N] [--vocab N] [--seed N]:
// writes a model with random weights in the shape of a real one (engine/synthetic_model.h), for
// benchmarks of shapes and weight types that no downloadable file here has.
#include <cstdint>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "cli/command.h"
#include "engine/synthetic_model.h"
#include "kernels/cpu/quantize.h"
#include "kernels/dtype.h"

namespace baton::cli {
namespace {

constexpr char kTypes[] =
    "f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, q2_k, q3_k, q4_k, q5_k, q6_k, q4_k_m";

// --type: a weight type every matrix takes, or q4_k_m (engine::SyntheticMix::kQ4_K_M).
absl::Status ApplyType(const std::string& name, engine::SyntheticModelOptions* options) {
  const std::string lower = absl::AsciiStrToLower(name);
  if (lower == "q4_k_m") {
    options->mix = engine::SyntheticMix::kQ4_K_M;
    options->weight_dtype = kernels::DType::kQ4_K;
    return absl::OkStatus();
  }
  if (const std::optional<kernels::DType> dtype = kernels::QuantizableTypeNamed(lower)) {
    options->weight_dtype = *dtype;
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(
      absl::StrCat("--type '", name, "' is not one of ", kTypes));
}

}  // namespace

int RunMakeModel(const Args& args) {
  const std::vector<FlagSpec> specs = {
      {"out", "PATH", "the GGUF file to write (required; replaced if it exists)"},
      {"shape", "NAME", absl::StrCat(engine::kSyntheticShapes, " (default tiny)")},
      {"type", "TYPE", absl::StrCat("weight type of the matrices: ", kTypes, " (default f32)")},
      {"layers", "N", "override the shape's layer count"},
      {"vocab", "N", "override the shape's vocabulary size (at least 262)"},
      {"seed", "N", "random seed (default 1)"},
      {"help", "", "show this help"},
  };
  const std::string usage = Usage(
      "make-model", "--out PATH [--shape NAME] [--type TYPE] [--layers N] [--seed N]", specs);
  absl::StatusOr<Flags> flags = Flags::Parse(args, specs);
  if (!flags.ok()) return UsageError("make-model", flags.status(), usage);
  if (flags->Has("help")) {
    std::cout << usage;
    return 0;
  }
  const std::optional<std::string> out = flags->Get("out");
  if (!out) return UsageError("make-model", absl::InvalidArgumentError("--out is required"), usage);
  absl::StatusOr<engine::SyntheticModelOptions> options =
      engine::SyntheticShape(flags->GetOr("shape", "tiny"));
  if (!options.ok()) return UsageError("make-model", options.status(), usage);
  if (absl::Status type = ApplyType(flags->GetOr("type", "f32"), &*options); !type.ok()) {
    return UsageError("make-model", type, usage);
  }
  absl::StatusOr<int64_t> layers = flags->GetInt("layers", options->n_layer, 1, 1024);
  absl::StatusOr<int64_t> vocab = flags->GetInt("vocab", options->n_vocab, 262, 1 << 22);
  absl::StatusOr<int64_t> seed = flags->GetInt("seed", 1, 0, INT64_MAX);
  for (const absl::Status& s : {layers.status(), vocab.status(), seed.status()}) {
    if (!s.ok()) return UsageError("make-model", s, usage);
  }
  options->n_layer = static_cast<int32_t>(*layers);
  options->n_vocab = static_cast<int32_t>(*vocab);
  options->seed = static_cast<uint64_t>(*seed);
  if (absl::Status written = engine::WriteSyntheticModel(*out, *options); !written.ok()) {
    return RunError("make-model", written);
  }
  std::cout << "wrote " << *out << "\n";
  return 0;
}

}  // namespace baton::cli
