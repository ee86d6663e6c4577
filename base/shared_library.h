// Libraries loaded when first needed rather than when the process starts (dlopen): cuBLAS, whose
// start-up alone keeps ~90 MB resident, and NCCL, which a machine may lack. A process that never
// uses them never maps them.
//
// Thread-safety: thread-safe (the loader's own locking).
#ifndef BATON_BASE_SHARED_LIBRARY_H_
#define BATON_BASE_SHARED_LIBRARY_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace baton {

struct SharedLibrary {
  void* handle = nullptr;  // kept open for the life of the process
  std::string path;        // the candidate that loaded

  // The symbol `name` as a function pointer of type F; false when the library lacks it.
  template <typename F>
  bool Resolve(const char* name, F* function) const {
    *function = reinterpret_cast<F>(FindSymbol(name));
    return *function != nullptr;
  }
  void* FindSymbol(const char* name) const;
};

// The first of `candidates` (file names the loader searches for, or paths) that loads; empty
// ones are skipped. UNAVAILABLE "<what> could not be loaded: <each candidate's error>".
absl::StatusOr<SharedLibrary> OpenSharedLibrary(const std::vector<std::string>& candidates,
                                                const char* what);

// Closes a library that turned out unusable (a function missing).
void CloseSharedLibrary(const SharedLibrary& library);

}  // namespace baton

#endif  // BATON_BASE_SHARED_LIBRARY_H_
