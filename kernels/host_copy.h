// Copies between a backend's memory and host memory that run beside the computation
// (Backend::CopyToHostAsync, Backend::CopyToDeviceUnordered): what the KV hand-off of a device's
// cache is made of.
//
// Thread-safety: HostCopy is a value; MergeContiguous is pure; a CopyFence may be waited on from
// any thread, by one thread at a time.
#ifndef BATON_KERNELS_HOST_COPY_H_
#define BATON_KERNELS_HOST_COPY_H_

#include <cstddef>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace baton::kernels {

// `bytes` from `source` to `destination`: one in host memory, the other in a backend's (the
// call that takes the copy says which way).
struct HostCopy {
  void* destination = nullptr;
  const void* source = nullptr;
  size_t bytes = 0;
};

// `copies` with each run of copies that continue one another on both sides (a copy's source and
// destination start where the previous one's end) made one copy; the order is kept. A device
// pays per copy it starts, and the blocks of one sequence are often neighbours in the cache.
std::vector<HostCopy> MergeContiguous(std::span<const HostCopy> copies);

// The end of a batch of copies in flight.
class CopyFence {
 public:
  // Waits for the copies if they are still running: their memory may be reused once the fence
  // is gone.
  virtual ~CopyFence() = default;

  // Waits until every copy has landed. OK; DEADLINE_EXCEEDED when `deadline` passes first (the
  // copies go on; a later Wait may still return OK); INTERNAL naming the device's error when it
  // failed (the copied bytes are then undefined).
  virtual absl::Status Wait(absl::Time deadline) = 0;
};

// A fence for copies that were complete before it was made.
class PassedFence final : public CopyFence {
 public:
  absl::Status Wait(absl::Time) override { return absl::OkStatus(); }
};

}  // namespace baton::kernels

#endif  // BATON_KERNELS_HOST_COPY_H_
