// The CUDA backend's copies between the host and the device beside the computation.
// To the host (Backend::CopyToHostAsync): a stream of their own that waits, through an event,
// for what the compute stream had queued when the copies were asked for, so that a layer's KV
// goes to the host while the next layer computes. Each batch ends with an event, which its
// fence polls.
// To the device (Backend::CopyToDeviceUnordered): a third stream, which waits for nothing on the
// compute stream, so that KV arriving for a reservation does not wait for the decode step.
//
// Thread-safety: Queue from the backend's operations' thread; fences from any thread; Upload
// from any thread (one upload at a time).
#ifndef BATON_KERNELS_CUDA_HOST_COPY_ENGINE_CUH_
#define BATON_KERNELS_CUDA_HOST_COPY_ENGINE_CUH_

#include <cuda_runtime.h>

#include <memory>
#include <span>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "kernels/host_copy.h"

namespace baton::kernels::cuda {

class HostCopyEngine {
 public:
  // On `device` (made current by the caller), after the work of `compute`.
  HostCopyEngine(int device, cudaStream_t compute);
  HostCopyEngine(const HostCopyEngine&) = delete;
  HostCopyEngine& operator=(const HostCopyEngine&) = delete;
  // Waits for the copies queued; fences may outlive the engine.
  ~HostCopyEngine();

  // Queues `copies` (contiguous runs merged) behind everything queued on `compute` so far.
  std::unique_ptr<CopyFence> Queue(std::span<const HostCopy> copies);

  // Copies host memory to the device (contiguous runs merged), unordered with the compute
  // stream; returns when they are complete.
  void Upload(std::span<const HostCopy> copies);

 private:
  const int device_;
  const cudaStream_t compute_;
  cudaStream_t copies_ = nullptr;
  cudaEvent_t computed_ = nullptr;  // recorded on compute_ before each batch
  absl::Mutex upload_mu_;
  cudaStream_t uploads_ ABSL_GUARDED_BY(upload_mu_) = nullptr;
};

}  // namespace baton::kernels::cuda

#endif  // BATON_KERNELS_CUDA_HOST_COPY_ENGINE_CUH_
