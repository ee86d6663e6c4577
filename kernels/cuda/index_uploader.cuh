// Host index arrays (token ids, positions, block tables, batch descriptors) copied to device
// memory for the kernels that read them. Each upload is staged in pinned host memory and copied
// asynchronously on the backend's stream, so it neither blocks the host nor waits for the GPU.
// The staging ring is reused from its start only after the stream has caught up (a wrap waits,
// as does growing it for an upload larger than the ring), so no slice is overwritten or freed
// while a copy or kernel may still read it. That holds for the work already enqueued: an
// operation uploads all its arrays at once (an IndexPack) before it launches, so a wrap never
// strands a slice it has yet to launch with. An upload equal to one of
// the last few uploaded is not copied again (a step's positions and block tables are the same
// for every layer): its earlier device copy is still in the ring, unchanged.
//
// Thread-safety: one thread at a time (the backend's operations' thread).
#ifndef BATON_KERNELS_CUDA_INDEX_UPLOADER_CUH_
#define BATON_KERNELS_CUDA_INDEX_UPLOADER_CUH_

#include <cuda_runtime.h>

#include <array>
#include <cstddef>
#include <cstdint>

#include "kernels/cuda/index_pack.h"

namespace baton::kernels::cuda {

class IndexUploader {
 public:
  explicit IndexUploader(cudaStream_t stream);
  IndexUploader(const IndexUploader&) = delete;
  IndexUploader& operator=(const IndexUploader&) = delete;
  ~IndexUploader();

  // A device copy of host[0, count), valid for the work enqueued on the stream after it and
  // before the next upload that wraps the ring. For an operation with one array.
  template <typename T>
  const T* Upload(const T* host, size_t count) {
    return static_cast<const T*>(UploadBytes(host, count * sizeof(T)));
  }
  // A device copy of the pack (IndexPack::At finds its arrays), valid as Upload's.
  const void* Upload(const IndexPack& pack) { return UploadBytes(pack.data(), pack.size()); }

  // Starts over at the ring's start, forgetting the recent uploads; waits for the stream (idle
  // where a step starts, so at no cost there). Uploads made in the same order and sizes after a
  // restart land at the same addresses (what a replayed step graph reads).
  void Restart();
  // stage_only: uploads are written to the pinned staging ring but not copied (a replayed graph
  // copies them); the ring may then not wrap, which ends the process, saying so.
  void set_stage_only(bool stage_only) { stage_only_ = stage_only; }
  // Whether the ring may wrap (a capture or a replay may not: set by the step's owner).
  void set_may_wrap(bool may_wrap) { may_wrap_ = may_wrap; }

 private:
  struct Recent {
    size_t offset = 0;
    size_t bytes = 0;  // 0: empty
  };

  const void* UploadBytes(const void* host, size_t bytes);
  const void* FindRecent(const void* host, size_t bytes) const;
  void Grow(size_t bytes);

  cudaStream_t stream_;
  uint8_t* pinned_ = nullptr;  // host, capacity_ bytes
  uint8_t* device_ = nullptr;  // device, capacity_ bytes
  size_t capacity_ = 0;
  size_t used_ = 0;
  std::array<Recent, 8> recent_;  // the last uploads, a ring; all emptied when the ring wraps
  size_t next_recent_ = 0;
  bool stage_only_ = false;
  bool may_wrap_ = true;
};

}  // namespace baton::kernels::cuda

#endif  // BATON_KERNELS_CUDA_INDEX_UPLOADER_CUH_
