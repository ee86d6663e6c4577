#include "kvtransfer/nccl/nccl_library.h"

#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/shared_library.h"

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

absl::StatusOr<NcclLibrary> Load() {
  absl::StatusOr<SharedLibrary> library =
      OpenSharedLibrary(Candidates(), "NCCL (set BATON_NCCL_LIBRARY to a libnccl.so.2)");
  if (!library.ok()) return library.status();
  NcclLibrary nccl;
  nccl.path = library->path;
  decltype(&ncclGetVersion) get_version = nullptr;
  const bool complete =
      library->Resolve("ncclGetVersion", &get_version) &&
      library->Resolve("ncclGetUniqueId", &nccl.GetUniqueId) &&
      library->Resolve("ncclCommInitRankConfig", &nccl.CommInitRankConfig) &&
      library->Resolve("ncclCommGetAsyncError", &nccl.CommGetAsyncError) &&
      library->Resolve("ncclCommAbort", &nccl.CommAbort) &&
      library->Resolve("ncclGroupStart", &nccl.GroupStart) &&
      library->Resolve("ncclGroupEnd", &nccl.GroupEnd) &&
      library->Resolve("ncclSend", &nccl.Send) && library->Resolve("ncclRecv", &nccl.Recv) &&
      library->Resolve("ncclGetErrorString", &nccl.GetErrorString) &&
      library->Resolve("ncclGetLastError", &nccl.GetLastError);
  if (!complete || get_version(&nccl.version) != ncclSuccess) {
    CloseSharedLibrary(*library);
    return absl::UnavailableError(
        absl::StrCat(library->path, ": not an NCCL 2.19+ library (a function is missing)"));
  }
  return nccl;
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
