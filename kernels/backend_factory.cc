#include "kernels/backend_factory.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

#if BATON_HAVE_CUDA
#include "kernels/cuda/cuda_backend.h"
#endif

namespace baton::kernels {

bool BuiltWithCuda() {
#if BATON_HAVE_CUDA
  return true;
#else
  return false;
#endif
}

absl::StatusOr<std::unique_ptr<Backend>> CreateBackend(const Device& device,
                                                       const CpuBackendOptions& cpu_options) {
  if (!device.is_cuda()) return CreateCpuBackend(cpu_options);
#if BATON_HAVE_CUDA
  absl::StatusOr<std::unique_ptr<Backend>> backend =
      cuda::CreateCudaBackend({.device = device.index});
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
      "built; see README.md, \"GPUs\")"));
#endif
}

}  // namespace baton::kernels
