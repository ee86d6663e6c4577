#include "prefill_worker/host_staging.h"

#include <algorithm>
#include <bit>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/log.h"

namespace baton::prefill_worker {
namespace {

// Buffers come in powers of two from 64 KiB, so that pushes of similar lengths reuse them.
constexpr size_t kMinBufferBytes = size_t{64} << 10;
// How long a StagedLayer that goes waits for a copy still running.
constexpr absl::Duration kCopyGrace = absl::Minutes(1);

}  // namespace

StagedLayer::~StagedLayer() {
  // A failed copy writes no more; one still running at its deadline might.
  const absl::Status landed = fence_->Wait(absl::Now() + kCopyGrace);
  if (landed.code() == absl::StatusCode::kDeadlineExceeded) {
    BATON_LOG(ERROR) << landed.message() << ": its host buffer is not reused";
    return;
  }
  pool_->Return({buffer_, capacity_});
}

kvtransfer::BlocksReady StagedLayer::ready() const {
  return [fence = fence_](std::chrono::system_clock::time_point deadline) {
    return fence->Wait(absl::FromChrono(deadline));
  };
}

HostStagingPool::HostStagingPool(kernels::Backend& backend, size_t max_idle_bytes)
    : backend_(backend), max_idle_bytes_(max_idle_bytes) {}

HostStagingPool::~HostStagingPool() {
  absl::MutexLock lock(&mu_);
  for (const Buffer& buffer : idle_) backend_.FreeHost(buffer.data);
}

size_t HostStagingPool::idle_bytes() const {
  absl::MutexLock lock(&mu_);
  return idle_bytes_;
}

absl::StatusOr<HostStagingPool::Buffer> HostStagingPool::Take(size_t bytes) {
  {
    absl::MutexLock lock(&mu_);
    // The smallest idle buffer that fits.
    auto best = idle_.end();
    for (auto it = idle_.begin(); it != idle_.end(); ++it) {
      if (it->capacity >= bytes && (best == idle_.end() || it->capacity < best->capacity)) {
        best = it;
      }
    }
    if (best != idle_.end()) {
      const Buffer buffer = *best;
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
  return Buffer{*data, capacity};
}

void HostStagingPool::Return(Buffer buffer) {
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

absl::StatusOr<std::unique_ptr<StagedLayer>> HostStagingPool::Stage(
    std::span<const uint8_t* const> device_blocks, size_t block_bytes) {
  absl::StatusOr<Buffer> buffer = Take(std::max<size_t>(device_blocks.size() * block_bytes, 1));
  if (!buffer.ok()) return buffer.status();
  std::unique_ptr<StagedLayer> staged(new StagedLayer(this, buffer->data, buffer->capacity));
  std::vector<kernels::HostCopy> copies;
  copies.reserve(device_blocks.size());
  auto* host = static_cast<uint8_t*>(buffer->data);
  for (size_t i = 0; i < device_blocks.size(); ++i) {
    copies.push_back({host + i * block_bytes, device_blocks[i], block_bytes});
    staged->blocks_.push_back(host + i * block_bytes);
  }
  staged->fence_ = backend_.CopyToHostAsync(copies);
  return staged;
}

}  // namespace baton::prefill_worker
