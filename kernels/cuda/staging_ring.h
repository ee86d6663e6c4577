// The bookkeeping of IndexUploader's staging ring, in plain C++ (tested without a GPU): where
// each upload goes in a ring of host staging memory mirrored by a device buffer of the same size,
// when the ring must wait for the stream before it reuses its start (a wrap), when it must be
// replaced by a larger one (an upload larger than the ring), and which recent upload an identical
// one can reuse instead of being copied again.
//
// The rule it keeps: no staged slice is overwritten (nor its buffer freed) while a copy or kernel
// enqueued before may still read it. Uploads go one after another from the ring's start; the
// start is reused only after Memory::WaitIdle, and the recent uploads are forgotten then, since
// the slices they name will be overwritten. For that to cover the work already enqueued, an
// operation uploads all its arrays at once before it launches (IndexPack).
//
// Thread-safety: one thread at a time (the backend's operations' thread).
#ifndef BATON_KERNELS_CUDA_STAGING_RING_H_
#define BATON_KERNELS_CUDA_STAGING_RING_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>

namespace baton::kernels::cuda {

class StagingRing {
 public:
  // The memory and the stream the ring manages (IndexUploader: pinned host memory, device
  // memory, a CUDA stream).
  class Memory {
   public:
    virtual ~Memory() = default;
    // Returns once every copy and kernel enqueued so far has run.
    virtual void WaitIdle() = 0;
    // Frees both buffers and allocates them anew with `bytes` each (called after WaitIdle);
    // returns the new host staging buffer.
    virtual uint8_t* Reallocate(size_t bytes) = 0;
    // Enqueues the copy of staging[offset, offset + bytes) to device[offset, offset + bytes).
    virtual void EnqueueCopy(size_t offset, size_t bytes) = 0;
  };

  static constexpr size_t kAlignment = 256;  // of every slice's offset
  static constexpr size_t kRecentUploads = 8;

  // Allocates the first buffers (`initial_bytes`) through `memory`, which must outlive the ring.
  StagingRing(Memory& memory, size_t initial_bytes);
  StagingRing(const StagingRing&) = delete;
  StagingRing& operator=(const StagingRing&) = delete;

  // Stages host[0, bytes) and enqueues its copy; returns its offset in the device buffer, valid
  // for the work enqueued after it until an upload wraps the ring. An upload equal, byte for byte,
  // to one of the last kRecentUploads since the last wrap returns that one's offset and copies
  // nothing.
  size_t Upload(const void* host, size_t bytes);

  // Starts over at the ring's start, forgetting the recent uploads; waits for the stream.
  // Uploads made in the same order and sizes after a restart land at the same offsets.
  void Restart();
  // stage_only: uploads are staged but no copy is enqueued (a replayed graph copies them).
  void set_stage_only(bool stage_only) { stage_only_ = stage_only; }
  // may_wrap false: an upload that would wrap (or grow) the ring ends the process, saying so (a
  // recorded step's addresses must not move).
  void set_may_wrap(bool may_wrap) { may_wrap_ = may_wrap; }

  size_t capacity() const { return capacity_; }
  size_t used() const { return used_; }

 private:
  struct Recent {
    size_t offset = 0;
    size_t bytes = 0;  // 0: empty
  };

  // The offset of an earlier upload equal to host[0, bytes), if one is remembered.
  std::optional<size_t> FindRecent(const void* host, size_t bytes) const;
  void Forget();

  Memory& memory_;
  uint8_t* staging_ = nullptr;  // capacity_ bytes, the memory's
  size_t capacity_ = 0;
  size_t used_ = 0;
  std::array<Recent, kRecentUploads> recent_;  // a ring of the last uploads
  size_t next_recent_ = 0;
  bool stage_only_ = false;
  bool may_wrap_ = true;
};

}  // namespace baton::kernels::cuda

#endif  // BATON_KERNELS_CUDA_STAGING_RING_H_
