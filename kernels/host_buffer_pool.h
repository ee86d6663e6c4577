// Host buffers that a backend copies to and from at full speed (Backend::AllocateHost:
// page-locked memory for a GPU), recycled, since page-locking fresh memory costs far more than a
// copy. Buffers come in powers of two from 64 KiB, so that requests of similar sizes reuse them;
// up to `max_idle_bytes` of idle ones are kept, the rest freed as they come back.
//
// Thread-safety: thread-safe.
#ifndef BATON_KERNELS_HOST_BUFFER_POOL_H_
#define BATON_KERNELS_HOST_BUFFER_POOL_H_

#include <cstddef>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "kernels/backend.h"

namespace baton::kernels {

struct HostBuffer {
  void* data = nullptr;
  size_t capacity = 0;  // bytes
};

class HostBufferPool {
 public:
  // Host memory from `backend`, which must outlive the pool.
  HostBufferPool(Backend& backend, size_t max_idle_bytes);
  HostBufferPool(const HostBufferPool&) = delete;
  HostBufferPool& operator=(const HostBufferPool&) = delete;
  ~HostBufferPool();  // frees the idle buffers; buffers taken must have come back (or leak)

  // A buffer of at least `bytes`: the smallest idle one that fits, or a new one.
  // RESOURCE_EXHAUSTED when no host memory can be had.
  absl::StatusOr<HostBuffer> Take(size_t bytes);
  // Gives a buffer from Take back.
  void Return(HostBuffer buffer);

  // Bytes of idle buffers kept.
  size_t idle_bytes() const;

 private:
  Backend& backend_;
  const size_t max_idle_bytes_;
  mutable absl::Mutex mu_;
  std::vector<HostBuffer> idle_ ABSL_GUARDED_BY(mu_);
  size_t idle_bytes_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace baton::kernels

#endif  // BATON_KERNELS_HOST_BUFFER_POOL_H_
