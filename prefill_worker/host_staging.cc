#include "prefill_worker/host_staging.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/log.h"

namespace baton::prefill_worker {
namespace {

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
  pool_->buffers_.Return({buffer_, capacity_});
}

kvtransfer::BlocksReady StagedLayer::ready() const {
  return [fence = fence_](std::chrono::system_clock::time_point deadline) {
    return fence->Wait(absl::FromChrono(deadline));
  };
}

HostStagingPool::HostStagingPool(kernels::Backend& backend, size_t max_idle_bytes)
    : backend_(backend), buffers_(backend, max_idle_bytes) {}

absl::StatusOr<std::unique_ptr<StagedLayer>> HostStagingPool::Stage(
    std::span<const uint8_t* const> device_blocks, size_t block_bytes) {
  absl::StatusOr<kernels::HostBuffer> buffer =
      buffers_.Take(std::max<size_t>(device_blocks.size() * block_bytes, 1));
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
