#include "kernels/cuda/device_info.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <string>

#include "absl/status/status.h"
#include "kernels/cuda/cublas_library.cuh"

namespace baton::kernels::cuda {

absl::StatusOr<std::vector<DeviceInfo>> ListDevices() {
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    return absl::UnavailableError(std::string("no usable CUDA device: ") + cudaGetErrorString(err));
  }
  if (count == 0) return absl::UnavailableError("no CUDA device is visible");
  std::vector<DeviceInfo> devices;
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp prop;
    err = cudaGetDeviceProperties(&prop, i);
    if (err != cudaSuccess) {
      return absl::UnavailableError("cudaGetDeviceProperties(" + std::to_string(i) +
                                    "): " + cudaGetErrorString(err));
    }
    devices.push_back({i, prop.name, prop.major, prop.minor, prop.totalGlobalMem});
  }
  return devices;
}

int CublasVersion() {
  absl::StatusOr<const CublasLibrary*> cublas = LoadCublas();
  if (!cublas.ok()) return 0;
  int version = 0;
  (*cublas)->GetProperty(MAJOR_VERSION, &version);
  int minor = 0;
  (*cublas)->GetProperty(MINOR_VERSION, &minor);
  return version * 10000 + minor * 100;
}

}  // namespace baton::kernels::cuda
