#include "kernels/cuda/staging_ring.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace baton::kernels::cuda {

StagingRing::StagingRing(Memory& memory, size_t initial_bytes) : memory_(memory) {
  staging_ = memory_.Reallocate(initial_bytes);
  capacity_ = initial_bytes;
}

void StagingRing::Forget() {
  used_ = 0;
  recent_.fill({});
  next_recent_ = 0;
}

void StagingRing::Restart() {
  memory_.WaitIdle();
  Forget();
}

std::optional<size_t> StagingRing::FindRecent(const void* host, size_t bytes) const {
  for (const Recent& r : recent_) {
    if (r.bytes == bytes && std::memcmp(staging_ + r.offset, host, bytes) == 0) {
      return r.offset;
    }
  }
  return std::nullopt;
}

size_t StagingRing::Upload(const void* host, size_t bytes) {
  if (bytes > 0) {
    if (const std::optional<size_t> same = FindRecent(host, bytes)) return *same;
  }
  const size_t slice = std::max(kAlignment, (bytes + kAlignment - 1) / kAlignment * kAlignment);
  if (used_ + slice > capacity_) {
    if (!may_wrap_) {
      std::fprintf(stderr, "fatal: a recorded step's index arrays (%zu bytes more) outgrew the "
                   "%zu-byte staging ring\n", slice, capacity_);
      std::abort();
    }
    memory_.WaitIdle();  // every earlier slice has been read
    Forget();
    if (slice > capacity_) {
      capacity_ = std::max(slice, 2 * capacity_);
      staging_ = memory_.Reallocate(capacity_);
    }
  }
  const size_t offset = used_;
  used_ += slice;
  if (bytes == 0) return offset;
  std::memcpy(staging_ + offset, host, bytes);
  recent_[next_recent_] = {.offset = offset, .bytes = bytes};
  next_recent_ = (next_recent_ + 1) % recent_.size();
  if (!stage_only_) memory_.EnqueueCopy(offset, bytes);
  return offset;
}

}  // namespace baton::kernels::cuda
