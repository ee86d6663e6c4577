#include "base/shared_library.h"

#include <dlfcn.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace baton {

void* SharedLibrary::FindSymbol(const char* name) const { return dlsym(handle, name); }

absl::StatusOr<SharedLibrary> OpenSharedLibrary(const std::vector<std::string>& candidates,
                                                const char* what) {
  std::vector<std::string> tried;
  for (const std::string& path : candidates) {
    if (path.empty()) continue;
    void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle != nullptr) return SharedLibrary{.handle = handle, .path = path};
    tried.push_back(dlerror());
  }
  return absl::UnavailableError(
      absl::StrCat(what, " could not be loaded: ", absl::StrJoin(tried, "; ")));
}

void CloseSharedLibrary(const SharedLibrary& library) { dlclose(library.handle); }

}  // namespace baton
