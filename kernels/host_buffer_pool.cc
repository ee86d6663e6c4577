#include "kernels/host_buffer_pool.h"

#include <algorithm>
#include <bit>
#include <limits>

#include "absl/strings/str_cat.h"

namespace baton::kernels {
namespace {

constexpr size_t kMinBufferBytes = size_t{64} << 10;

}  // namespace

HostBufferPool::HostBufferPool(Backend& backend, size_t max_idle_bytes)
    : backend_(backend), max_idle_bytes_(max_idle_bytes) {}

HostBufferPool::~HostBufferPool() {
  absl::MutexLock lock(&mu_);
  for (const HostBuffer& buffer : idle_) backend_.FreeHost(buffer.data);
}

size_t HostBufferPool::idle_bytes() const {
  absl::MutexLock lock(&mu_);
  return idle_bytes_;
}

absl::StatusOr<HostBuffer> HostBufferPool::Take(size_t bytes) {
  {
    absl::MutexLock lock(&mu_);
    auto best = idle_.end();
    for (auto it = idle_.begin(); it != idle_.end(); ++it) {
      if (it->capacity >= bytes && (best == idle_.end() || it->capacity < best->capacity)) {
        best = it;
      }
    }
    if (best != idle_.end()) {
      const HostBuffer buffer = *best;
      idle_.erase(best);
      idle_bytes_ -= buffer.capacity;
      return buffer;
    }
  }
  if (bytes > std::numeric_limits<size_t>::max() / 2) {
    return absl::ResourceExhaustedError(absl::StrCat("no host buffer of ", bytes, " bytes"));
  }
  const size_t capacity = std::bit_ceil(std::max(bytes, kMinBufferBytes));
  absl::StatusOr<void*> data = backend_.AllocateHost(capacity);
  if (!data.ok()) return data.status();
  return HostBuffer{*data, capacity};
}

void HostBufferPool::Return(HostBuffer buffer) {
  {
    absl::MutexLock lock(&mu_);
    if (idle_bytes_ + buffer.capacity <= max_idle_bytes_) {
      idle_.push_back(buffer);
      idle_bytes_ += buffer.capacity;
      return;
    }
  }
  backend_.FreeHost(buffer.data);
}

}  // namespace baton::kernels
