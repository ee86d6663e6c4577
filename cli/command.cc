#include "cli/command.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <iostream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "kernels/cpu/quantize.h"

namespace baton::cli {

namespace {
constexpr char kDefaultModelFile[] = "models/SmolLM2-135M-Instruct.Q4_1.gguf";
}  // namespace

int UsageError(std::string_view command, const absl::Status& status, const std::string& usage) {
  std::cerr << "baton " << command << ": " << status.message() << "\n" << usage;
  return 2;
}

int RunError(std::string_view command, const absl::Status& status) {
  std::cerr << "baton " << command << ": " << status.message() << "\n";
  return 1;
}

FlagSpec QuantizeFlagSpec() {
  return {"quantize", "TYPE",
          "quantize a Hugging Face checkpoint's matrices at load: q8_0, q4_0, q4_1, q5_0, q5_1, "
          "q2_k, q3_k, q4_k, q5_k, q6_k, f16, bf16 (default: as stored)"};
}

absl::StatusOr<engine::LoadOptions> LoadOptionsFlag(const Flags& flags) {
  engine::LoadOptions options;
  const std::optional<std::string> name = flags.Get("quantize");
  if (!name) return options;
  options.quantize = kernels::QuantizableTypeNamed(*name);
  if (!options.quantize) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--quantize '", *name, "' is not one of q8_0, q4_0, q4_1, q5_0, q5_1, q2_k, q3_k, q4_k, "
        "q5_k, q6_k, f16, bf16, f32"));
  }
  return options;
}

FlagSpec DeviceFlagSpec() {
  return {"device", "DEVICE", "where the model runs: cpu, cuda or cuda:N (default cpu)"};
}

absl::StatusOr<kernels::Device> DeviceFlag(const Flags& flags) {
  return kernels::ParseDevice(flags.GetOr("device", "cpu"));
}

std::string DefaultModelPath() {
  if (const char* env = std::getenv("BATON_MODEL"); env != nullptr && *env != '\0') return env;
  std::error_code ec;
  std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    std::filesystem::path candidate = exe.parent_path() / "../.." / kDefaultModelFile;
    if (std::filesystem::exists(candidate, ec)) return candidate.lexically_normal().string();
  }
  return kDefaultModelFile;
}

absl::StatusOr<int64_t> ParseByteSize(const std::string& text) {
  if (text.empty()) return absl::InvalidArgumentError("empty size");
  int64_t multiplier = 1;
  std::string digits = text;
  switch (text.back()) {
    case 'K': case 'k': multiplier = int64_t{1} << 10; digits.pop_back(); break;
    case 'M': case 'm': multiplier = int64_t{1} << 20; digits.pop_back(); break;
    case 'G': case 'g': multiplier = int64_t{1} << 30; digits.pop_back(); break;
    default: break;
  }
  int64_t value = 0;
  if (digits.empty() || !absl::SimpleAtoi(digits, &value) || value <= 0 ||
      value > (int64_t{1} << 50) / multiplier) {
    return absl::InvalidArgumentError(absl::StrCat("'", text, "' is not a size such as 512M"));
  }
  return value * multiplier;
}

}  // namespace baton::cli
