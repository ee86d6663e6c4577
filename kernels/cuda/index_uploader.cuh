// Host index arrays (token ids, positions, block tables, batch descriptors) copied to device
// memory for the kernels that read them. Each upload is staged in pinned host memory and copied
// asynchronously on the backend's stream, so it neither blocks the host nor waits for the GPU.
// Where each upload goes, when the ring waits for the stream and when it grows, and which recent
// identical upload is reused, is StagingRing's (staging_ring.h, tested without a GPU); this class
// gives it pinned and device memory and the stream.
//
// Thread-safety: one thread at a time (the backend's operations' thread).
#ifndef BATON_KERNELS_CUDA_INDEX_UPLOADER_CUH_
#define BATON_KERNELS_CUDA_INDEX_UPLOADER_CUH_

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "kernels/cuda/index_pack.h"
#include "kernels/cuda/staging_ring.h"

namespace baton::kernels::cuda {

class IndexUploader : private StagingRing::Memory {
 public:
  explicit IndexUploader(cudaStream_t stream);
  IndexUploader(const IndexUploader&) = delete;
  IndexUploader& operator=(const IndexUploader&) = delete;
  ~IndexUploader() override;

  // A device copy of host[0, count), valid for the work enqueued on the stream after it and
  // before the next upload that wraps the ring. For an operation with one array.
  template <typename T>
  const T* Upload(const T* host, size_t count) {
    return static_cast<const T*>(UploadBytes(host, count * sizeof(T)));
  }
  // A device copy of the pack (IndexPack::At finds its arrays), valid as Upload's.
  const void* Upload(const IndexPack& pack) { return UploadBytes(pack.data(), pack.size()); }

  // StagingRing's Restart, set_stage_only and set_may_wrap.
  void Restart() { ring_.Restart(); }
  void set_stage_only(bool stage_only) { ring_.set_stage_only(stage_only); }
  void set_may_wrap(bool may_wrap) { ring_.set_may_wrap(may_wrap); }

 private:
  const void* UploadBytes(const void* host, size_t bytes) {
    const size_t offset = ring_.Upload(host, bytes);
    return device_ + offset;  // device_ after any growth the upload caused
  }

  // StagingRing::Memory
  void WaitIdle() override;
  uint8_t* Reallocate(size_t bytes) override;
  void EnqueueCopy(size_t offset, size_t bytes) override;

  void Free();

  cudaStream_t stream_;
  uint8_t* pinned_ = nullptr;  // host
  uint8_t* device_ = nullptr;  // device, as many bytes
  StagingRing ring_;           // after the buffers: its constructor allocates them
};

}  // namespace baton::kernels::cuda

#endif  // BATON_KERNELS_CUDA_INDEX_UPLOADER_CUH_
