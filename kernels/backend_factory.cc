#include "kernels/backend_factory.h"

#include <cstdlib>
#include <fstream>
#include <optional>
#include <sstream>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

#if BATON_HAVE_CUDA
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/device_info.h"
#endif

namespace baton::kernels {

absl::StatusOr<std::vector<std::string>> DescribeGpus() {
#if BATON_HAVE_CUDA
  absl::StatusOr<std::vector<cuda::DeviceInfo>> devices = cuda::ListDevices();
  if (!devices.ok()) return devices.status();
  std::vector<std::string> lines;
  for (const cuda::DeviceInfo& d : *devices) {
    lines.push_back(absl::StrCat("cuda:", d.index, " ", d.name, ", ",
                                 d.total_memory_bytes >> 30, " GiB, compute ",
                                 d.compute_capability_major, ".", d.compute_capability_minor));
  }
  return lines;
#else
  return absl::UnavailableError(
      "this build of baton has no CUDA backend (the CUDA toolkit was not found when it was built)");
#endif
}

#if BATON_HAVE_CUDA
namespace {

// The table that BATON_CUDA_PRODUCT_TABLE names, if it is set.
absl::StatusOr<std::optional<std::vector<cuda::ProductChoice>>> ProductTableFromEnvironment() {
  const char* path = std::getenv("BATON_CUDA_PRODUCT_TABLE");
  if (path == nullptr) return std::nullopt;
  std::ifstream file(path);
  std::stringstream text;
  text << file.rdbuf();
  if (!file) {
    return absl::NotFoundError(
        absl::StrCat("BATON_CUDA_PRODUCT_TABLE=", path, ": cannot read the file"));
  }
  absl::StatusOr<std::vector<cuda::ProductChoice>> table = cuda::ParseProductTable(text.str());
  if (!table.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("BATON_CUDA_PRODUCT_TABLE=", path, ": ",
                                                   table.status().message()));
  }
  return *std::move(table);
}

}  // namespace
#endif

absl::StatusOr<std::unique_ptr<Backend>> CreateBackend(const Device& device,
                                                       const CpuBackendOptions& cpu_options) {
  if (!device.is_cuda()) return CreateCpuBackend(cpu_options);
#if BATON_HAVE_CUDA
  absl::StatusOr<std::optional<std::vector<cuda::ProductChoice>>> table =
      ProductTableFromEnvironment();
  absl::StatusOr<std::unique_ptr<Backend>> backend =
      table.ok() ? cuda::CreateCudaBackend({
                       .device = device.index,
                       .exact_products = std::getenv("BATON_CUDA_EXACT_PRODUCTS") != nullptr,
                       .step_graphs = std::getenv("BATON_CUDA_NO_GRAPHS") == nullptr,
                       .flash_attention = std::getenv("BATON_CUDA_FLASH_ATTENTION") != nullptr,
                       .product_table = *std::move(table),
                   })
                 : table.status();
  if (!backend.ok()) {
    return absl::Status(backend.status().code(),
                        absl::StrCat("--device ", device.ToString(), ": ",
                                     backend.status().message()));
  }
  return backend;
#else
  return absl::UnavailableError(absl::StrCat(
      "--device ", device.ToString(),
      ": this build of baton has no CUDA backend (the CUDA toolkit was not found when it was "
      "built; see docs/GPU.md)"));
#endif
}

}  // namespace baton::kernels
