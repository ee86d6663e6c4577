#include "kernels/cuda/cublas_library.cuh"

#include <cstdlib>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/shared_library.h"

namespace baton::kernels::cuda {
namespace {

absl::StatusOr<CublasLibrary> Load() {
  const std::string name = absl::StrCat("libcublas.so.", CUBLAS_VER_MAJOR);
  const std::vector<std::string> candidates = {name,
                                               absl::StrCat(BATON_CUDA_LIBRARY_DIR, "/", name)};
  absl::StatusOr<SharedLibrary> library = OpenSharedLibrary(candidates, "cuBLAS");
  if (!library.ok()) return library.status();
  CublasLibrary cublas;
  cublas.path = library->path;
  const bool complete = library->Resolve("cublasCreate_v2", &cublas.Create) &&
                        library->Resolve("cublasSetStream_v2", &cublas.SetStream) &&
                        library->Resolve("cublasDestroy_v2", &cublas.Destroy) &&
                        library->Resolve("cublasGemmEx", &cublas.GemmEx) &&
                        library->Resolve("cublasGetProperty", &cublas.GetProperty) &&
                        library->Resolve("cublasGetStatusString", &cublas.GetStatusString);
  if (!complete) {
    CloseSharedLibrary(*library);
    return absl::UnavailableError(absl::StrCat(library->path, ": a cuBLAS function is missing"));
  }
  return cublas;
}

const absl::StatusOr<CublasLibrary>& Loaded() {
  static const auto* loaded = new absl::StatusOr<CublasLibrary>(Load());
  return *loaded;
}

}  // namespace

absl::StatusOr<const CublasLibrary*> LoadCublas() {
  if (!Loaded().ok()) return Loaded().status();
  return &*Loaded();
}

const CublasLibrary& Cublas() {
  if (!Loaded().ok()) std::abort();  // no CUDA backend exists without it
  return *Loaded();
}

}  // namespace baton::kernels::cuda
