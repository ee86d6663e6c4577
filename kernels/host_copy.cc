#include "kernels/host_copy.h"

namespace baton::kernels {

std::vector<HostCopy> MergeContiguous(std::span<const HostCopy> copies) {
  std::vector<HostCopy> merged;
  for (const HostCopy& copy : copies) {
    if (!merged.empty()) {
      HostCopy& last = merged.back();
      const bool continues =
          static_cast<char*>(last.destination) + last.bytes == copy.destination &&
          static_cast<const char*>(last.source) + last.bytes == copy.source;
      if (continues) {
        last.bytes += copy.bytes;
        continue;
      }
    }
    merged.push_back(copy);
  }
  return merged;
}

}  // namespace baton::kernels
