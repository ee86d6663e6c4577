#include "kernels/cuda/host_copy_engine.cuh"

#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "kernels/cuda/cuda_check.cuh"

namespace baton::kernels::cuda {
namespace {

// How often a waiting fence asks the device: a copy of a layer's blocks takes tens of
// microseconds and more.
constexpr absl::Duration kPollInterval = absl::Microseconds(20);

class EventFence final : public CopyFence {
 public:
  EventFence(int device, cudaEvent_t done) : device_(device), done_(done) {}
  ~EventFence() override {
    cudaSetDevice(device_);
    cudaEventSynchronize(done_);
    cudaEventDestroy(done_);
  }

  absl::Status Wait(absl::Time deadline) override {
    BATON_CUDA_CHECK(cudaSetDevice(device_));
    while (true) {
      const cudaError_t state = cudaEventQuery(done_);
      if (state == cudaSuccess) return absl::OkStatus();
      if (state != cudaErrorNotReady) {
        return absl::InternalError(absl::StrCat("cuda:", device_, ": copy to the host failed: ",
                                                cudaGetErrorString(state)));
      }
      if (absl::Now() >= deadline) {
        return absl::DeadlineExceededError(
            absl::StrCat("cuda:", device_, ": copy to the host still running at its deadline"));
      }
      absl::SleepFor(kPollInterval);
    }
  }

 private:
  const int device_;
  const cudaEvent_t done_;
};

}  // namespace

HostCopyEngine::HostCopyEngine(int device, cudaStream_t compute)
    : device_(device), compute_(compute) {
  BATON_CUDA_CHECK(cudaStreamCreateWithFlags(&copies_, cudaStreamNonBlocking));
  BATON_CUDA_CHECK(cudaEventCreateWithFlags(&computed_, cudaEventDisableTiming));
  absl::MutexLock lock(&upload_mu_);
  BATON_CUDA_CHECK(cudaStreamCreateWithFlags(&uploads_, cudaStreamNonBlocking));
}

HostCopyEngine::~HostCopyEngine() {
  cudaSetDevice(device_);
  cudaStreamSynchronize(copies_);
  cudaEventDestroy(computed_);
  cudaStreamDestroy(copies_);
  absl::MutexLock lock(&upload_mu_);
  cudaStreamDestroy(uploads_);
}

void HostCopyEngine::Upload(std::span<const HostCopy> copies) {
  BATON_CUDA_CHECK(cudaSetDevice(device_));
  absl::MutexLock lock(&upload_mu_);
  for (const HostCopy& copy : MergeContiguous(copies)) {
    BATON_CUDA_CHECK(cudaMemcpyAsync(copy.destination, copy.source, copy.bytes,
                                     cudaMemcpyHostToDevice, uploads_));
  }
  BATON_CUDA_CHECK(cudaStreamSynchronize(uploads_));
}

std::unique_ptr<CopyFence> HostCopyEngine::Queue(std::span<const HostCopy> copies) {
  BATON_CUDA_CHECK(cudaEventRecord(computed_, compute_));
  BATON_CUDA_CHECK(cudaStreamWaitEvent(copies_, computed_, 0));
  for (const HostCopy& copy : MergeContiguous(copies)) {
    BATON_CUDA_CHECK(cudaMemcpyAsync(copy.destination, copy.source, copy.bytes,
                                     cudaMemcpyDeviceToHost, copies_));
  }
  cudaEvent_t done = nullptr;
  BATON_CUDA_CHECK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
  BATON_CUDA_CHECK(cudaEventRecord(done, copies_));
  return std::make_unique<EventFence>(device_, done);
}

}  // namespace baton::kernels::cuda
