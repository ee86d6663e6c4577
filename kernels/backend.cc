#include "kernels/backend.h"

#include <algorithm>
#include <new>

#include "absl/strings/str_cat.h"

namespace baton::kernels {

absl::StatusOr<void*> Backend::AllocateHost(size_t bytes) {
  void* p = ::operator new(std::max<size_t>(bytes, 1), std::align_val_t{64}, std::nothrow);
  if (p == nullptr) {
    return absl::ResourceExhaustedError(
        absl::StrCat("cannot allocate ", bytes, " bytes of host memory"));
  }
  return p;
}

void Backend::FreeHost(void* pointer) { ::operator delete(pointer, std::align_val_t{64}); }

std::unique_ptr<CopyFence> Backend::CopyToHostAsync(std::span<const HostCopy> copies) {
  for (const HostCopy& copy : copies) CopyToHost(copy.destination, copy.source, copy.bytes);
  return std::make_unique<PassedFence>();
}

void Backend::CopyToDeviceUnordered(std::span<const HostCopy> copies) {
  for (const HostCopy& copy : copies) CopyToDevice(copy.destination, copy.source, copy.bytes);
}

}  // namespace baton::kernels
