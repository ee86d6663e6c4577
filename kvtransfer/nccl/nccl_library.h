// libnccl.so.2, loaded at run time (nccl_link_factory.h says from where): the functions the
// links call, and the version loaded. Only the NCCL sources include this (it needs nccl.h).
//
// Thread-safety: LoadNccl is thread-safe; the table is immutable once loaded.
#ifndef BATON_KVTRANSFER_NCCL_NCCL_LIBRARY_H_
#define BATON_KVTRANSFER_NCCL_NCCL_LIBRARY_H_

#include <nccl.h>

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace baton::kvtransfer::nccl {

struct NcclLibrary {
  std::string path;  // where it was loaded from
  int version = 0;   // ncclGetVersion: 22809 for 2.28.9
  decltype(&ncclGetUniqueId) GetUniqueId = nullptr;
  decltype(&ncclCommInitRankConfig) CommInitRankConfig = nullptr;
  decltype(&ncclCommGetAsyncError) CommGetAsyncError = nullptr;
  decltype(&ncclCommAbort) CommAbort = nullptr;
  decltype(&ncclGroupStart) GroupStart = nullptr;
  decltype(&ncclGroupEnd) GroupEnd = nullptr;
  decltype(&ncclSend) Send = nullptr;
  decltype(&ncclRecv) Recv = nullptr;
  decltype(&ncclGetErrorString) GetErrorString = nullptr;
  decltype(&ncclGetLastError) GetLastError = nullptr;

  // UNAVAILABLE "NCCL <what>: <error string> (<last error>)".
  absl::Status Error(const char* what, ncclResult_t result, ncclComm_t comm = nullptr) const;
};

// The library, loaded on the first call (later calls return the same table, or the same error).
// UNAVAILABLE saying where it looked when it does not load or lacks a function.
absl::StatusOr<const NcclLibrary*> LoadNccl();

}  // namespace baton::kvtransfer::nccl

#endif  // BATON_KVTRANSFER_NCCL_NCCL_LIBRARY_H_
