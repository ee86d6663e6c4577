// What CUDA devices this process can see. Plain C++: callers need no CUDA headers.
//
// Thread-safety: safe from any thread (the CUDA runtime is).
#ifndef BATON_KERNELS_CUDA_DEVICE_INFO_H_
#define BATON_KERNELS_CUDA_DEVICE_INFO_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace baton::kernels::cuda {

struct DeviceInfo {
  int index;
  std::string name;
  int compute_capability_major;
  int compute_capability_minor;
  size_t total_memory_bytes;
};

// The visible devices. UNAVAILABLE (with the CUDA runtime's reason, e.g. no driver or no device)
// when there is none.
absl::StatusOr<std::vector<DeviceInfo>> ListDevices();

// Version of the cuBLAS library linked in (e.g. 130000), to prove it links.
int CublasVersion();

}  // namespace baton::kernels::cuda

#endif  // BATON_KERNELS_CUDA_DEVICE_INFO_H_
