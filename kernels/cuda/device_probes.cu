#include "kernels/cuda/device_probes.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "kernels/cuda/cublas_library.cuh"
#include "kernels/cuda/device_matmul.cuh"

namespace baton::kernels::cuda {
namespace {

absl::Status CudaStatus(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return absl::OkStatus();
  cudaGetLastError();
  return absl::UnavailableError(absl::StrCat(what, ": ", cudaGetErrorString(err)));
}

// Device memory and a stream with two events, freed on scope exit.
struct ProbeScope {
  cudaStream_t stream = nullptr;
  cudaEvent_t start = nullptr, stop = nullptr;
  void* buffers[3] = {nullptr, nullptr, nullptr};
  ~ProbeScope() {
    for (void* b : buffers) {
      if (b != nullptr) cudaFree(b);
    }
    if (start != nullptr) cudaEventDestroy(start);
    if (stop != nullptr) cudaEventDestroy(stop);
    if (stream != nullptr) cudaStreamDestroy(stream);
  }
  absl::Status Init(int device) {
    if (absl::Status s = CudaStatus(cudaSetDevice(device), "cudaSetDevice"); !s.ok()) return s;
    if (absl::Status s = CudaStatus(cudaStreamCreate(&stream), "cudaStreamCreate"); !s.ok()) {
      return s;
    }
    if (absl::Status s = CudaStatus(cudaEventCreate(&start), "cudaEventCreate"); !s.ok()) return s;
    return CudaStatus(cudaEventCreate(&stop), "cudaEventCreate");
  }
  absl::Status Allocate(int i, size_t bytes) {
    if (absl::Status s = CudaStatus(cudaMalloc(&buffers[i], bytes), "cudaMalloc"); !s.ok()) {
      return s;
    }
    // Non-zero values: tensor cores draw more power on real data than on zeros.
    return CudaStatus(cudaMemset(buffers[i], 0x3b, bytes), "cudaMemset");
  }
  // Seconds `work` takes on the stream, best of `repeats` after one warm-up.
  template <typename Work>
  absl::StatusOr<double> Time(int repeats, const Work& work) {
    double best = 1e30;
    for (int r = 0; r <= repeats; ++r) {
      cudaEventRecord(start, stream);
      if (absl::Status s = work(); !s.ok()) return s;
      cudaEventRecord(stop, stream);
      if (absl::Status s = CudaStatus(cudaEventSynchronize(stop), "the probe"); !s.ok()) return s;
      float ms = 0.0f;
      cudaEventElapsedTime(&ms, start, stop);
      if (r > 0) best = std::min(best, ms / 1e3);
    }
    return best;
  }
};

}  // namespace

absl::StatusOr<double> MeasureCopyBandwidth(int device) {
  constexpr size_t kBytes = size_t{1} << 30;
  ProbeScope p;
  if (absl::Status s = p.Init(device); !s.ok()) return s;
  if (absl::Status s = p.Allocate(0, kBytes); !s.ok()) return s;
  if (absl::Status s = p.Allocate(1, kBytes); !s.ok()) return s;
  absl::StatusOr<double> seconds = p.Time(5, [&] {
    return CudaStatus(cudaMemcpyAsync(p.buffers[1], p.buffers[0], kBytes,
                                      cudaMemcpyDeviceToDevice, p.stream),
                      "cudaMemcpyAsync");
  });
  if (!seconds.ok()) return seconds.status();
  return 2.0 * static_cast<double>(kBytes) / *seconds;
}

absl::StatusOr<double> TimeF16Gemms(int device, std::span<const GemmShape> shapes, int64_t n) {
  int64_t max_w = 1, max_cols = 1, max_rows = 1;
  for (const GemmShape& g : shapes) {
    max_w = std::max(max_w, g.n_rows * g.n_cols);
    max_cols = std::max(max_cols, g.n_cols);
    max_rows = std::max(max_rows, g.n_rows);
  }
  ProbeScope p;
  if (absl::Status s = p.Init(device); !s.ok()) return s;
  if (absl::Status s = p.Allocate(0, max_w * 2); !s.ok()) return s;
  if (absl::Status s = p.Allocate(1, n * max_cols * 2); !s.ok()) return s;
  if (absl::Status s = p.Allocate(2, n * max_rows * 4); !s.ok()) return s;
  cublasHandle_t cublas = nullptr;
  if (Cublas().Create(&cublas) != CUBLAS_STATUS_SUCCESS) {
    return absl::UnavailableError("cublasCreate failed");
  }
  Cublas().SetStream(cublas, p.stream);
  absl::StatusOr<double> seconds = p.Time(3, [&]() -> absl::Status {
    for (const GemmShape& g : shapes) {
      const cublasStatus_t st =
          GemmWithWeightRows(cublas, CUDA_R_16F, p.buffers[0], p.buffers[1],
                             static_cast<float*>(p.buffers[2]), g.n_rows, g.n_cols, n);
      if (st != CUBLAS_STATUS_SUCCESS) {
        return absl::InternalError(absl::StrCat("cublasGemmEx: ", Cublas().GetStatusString(st)));
      }
    }
    return absl::OkStatus();
  });
  Cublas().Destroy(cublas);
  return seconds;
}

}  // namespace baton::kernels::cuda
