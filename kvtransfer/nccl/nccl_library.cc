#include "kvtransfer/nccl/nccl_library.h"

#include <dlfcn.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace baton::kvtransfer::nccl {
namespace {

// Where to look, in order.
std::vector<std::string> Candidates() {
  std::vector<std::string> paths;
  if (const char* chosen = std::getenv("BATON_NCCL_LIBRARY"); chosen != nullptr && *chosen) {
    paths.push_back(chosen);
  }
  paths.push_back("libnccl.so.2");
  if (std::string built = BATON_NCCL_BUILD_LIBRARY; !built.empty()) paths.push_back(built);
  return paths;
}

template <typename F>
bool Resolve(void* handle, const char* name, F* function) {
  *function = reinterpret_cast<F>(dlsym(handle, name));
  return *function != nullptr;
}

absl::StatusOr<NcclLibrary> Load() {
  std::vector<std::string> tried;
  for (const std::string& path : Candidates()) {
    void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) {
      tried.push_back(dlerror());
      continue;
    }
    NcclLibrary nccl;
    nccl.path = path;
    decltype(&ncclGetVersion) get_version = nullptr;
    const bool complete =
        Resolve(handle, "ncclGetVersion", &get_version) &&
        Resolve(handle, "ncclGetUniqueId", &nccl.GetUniqueId) &&
        Resolve(handle, "ncclCommInitRankConfig", &nccl.CommInitRankConfig) &&
        Resolve(handle, "ncclCommGetAsyncError", &nccl.CommGetAsyncError) &&
        Resolve(handle, "ncclCommAbort", &nccl.CommAbort) &&
        Resolve(handle, "ncclGroupStart", &nccl.GroupStart) &&
        Resolve(handle, "ncclGroupEnd", &nccl.GroupEnd) &&
        Resolve(handle, "ncclSend", &nccl.Send) && Resolve(handle, "ncclRecv", &nccl.Recv) &&
        Resolve(handle, "ncclGetErrorString", &nccl.GetErrorString) &&
        Resolve(handle, "ncclGetLastError", &nccl.GetLastError);
    if (!complete || get_version(&nccl.version) != ncclSuccess) {
      tried.push_back(absl::StrCat(path, ": not an NCCL 2.19+ library (a function is missing)"));
      dlclose(handle);
      continue;
    }
    return nccl;  // kept loaded for the life of the process
  }
  return absl::UnavailableError(absl::StrCat(
      "NCCL could not be loaded (set BATON_NCCL_LIBRARY to a libnccl.so.2): ",
      absl::StrJoin(tried, "; ")));
}

}  // namespace

absl::Status NcclLibrary::Error(const char* what, ncclResult_t result, ncclComm_t comm) const {
  const char* last = GetLastError(comm);
  return absl::UnavailableError(absl::StrCat("NCCL ", what, ": ", GetErrorString(result),
                                             last != nullptr && *last ? " (" : "",
                                             last != nullptr ? last : "",
                                             last != nullptr && *last ? ")" : ""));
}

absl::StatusOr<const NcclLibrary*> LoadNccl() {
  static const auto* loaded = new absl::StatusOr<NcclLibrary>(Load());
  if (!loaded->ok()) return loaded->status();
  return &**loaded;
}

}  // namespace baton::kvtransfer::nccl
