#include "cli/command.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <iostream>

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

}  // namespace baton::cli
