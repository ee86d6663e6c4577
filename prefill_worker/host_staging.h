// Host copies of a device KV cache's blocks for the KV push: the prefill worker's side of a
// hand-off from a GPU. A layer's blocks go to page-locked host memory on the backend's copy
// stream while the next layer computes (Backend::CopyToHostAsync); the push waits for the copy
// before it reads them (KvPush::SendLayer's `ready`). The compute thread never waits.
//
// Host buffers are recycled (kernels/host_buffer_pool.h): a StagedLayer's buffer goes back to
// the pool when it is destroyed, after its copy has landed.
//
// Thread-safety: HostStagingPool is thread-safe; Stage is called from the thread that queues
// the backend's operations. A StagedLayer belongs to one push; its `ready` may run on any thread.
#ifndef BATON_PREFILL_WORKER_HOST_STAGING_H_
#define BATON_PREFILL_WORKER_HOST_STAGING_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/backend.h"
#include "kernels/host_buffer_pool.h"
#include "kernels/host_copy.h"
#include "kvtransfer/kv_transport.h"

namespace baton::prefill_worker {

class HostStagingPool;

// One layer's blocks on their way to the host.
class StagedLayer {
 public:
  StagedLayer(const StagedLayer&) = delete;
  StagedLayer& operator=(const StagedLayer&) = delete;
  // Waits (up to a minute) for the copy, then gives the buffer back; a copy still running then
  // keeps its buffer, which is never reused.
  ~StagedLayer();

  // The host copies, in the order of the device blocks; they hold their bytes once ready() has
  // returned OK.
  const std::vector<const uint8_t*>& blocks() const { return blocks_; }
  // Waits for the copy (kv_transport.h's BlocksReady).
  kvtransfer::BlocksReady ready() const;

 private:
  friend class HostStagingPool;
  StagedLayer(HostStagingPool* pool, void* buffer, size_t capacity)
      : pool_(pool), buffer_(buffer), capacity_(capacity) {}

  HostStagingPool* const pool_;
  void* const buffer_;
  const size_t capacity_;
  std::vector<const uint8_t*> blocks_;
  std::shared_ptr<kernels::CopyFence> fence_;
};

class HostStagingPool {
 public:
  // Host memory from `backend` (AllocateHost), which must outlive the pool.
  HostStagingPool(kernels::Backend& backend, size_t max_idle_bytes);
  HostStagingPool(const HostStagingPool&) = delete;
  HostStagingPool& operator=(const HostStagingPool&) = delete;
  ~HostStagingPool() = default;  // every StagedLayer must be gone

  // Queues copies of `device_blocks` (`block_bytes` each, in the backend's memory) into one host
  // buffer, behind the backend's operations queued so far. RESOURCE_EXHAUSTED when no host
  // memory can be had.
  absl::StatusOr<std::unique_ptr<StagedLayer>> Stage(
      std::span<const uint8_t* const> device_blocks, size_t block_bytes);

  // Bytes of idle buffers kept.
  size_t idle_bytes() const { return buffers_.idle_bytes(); }

 private:
  friend class StagedLayer;

  kernels::Backend& backend_;
  kernels::HostBufferPool buffers_;
};

}  // namespace baton::prefill_worker

#endif  // BATON_PREFILL_WORKER_HOST_STAGING_H_
