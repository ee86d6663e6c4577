#include "kernels/cuda/index_uploader.cuh"

#include <algorithm>
#include <cstring>

#include "kernels/cuda/cuda_check.cuh"

namespace baton::kernels::cuda {
namespace {

constexpr size_t kInitialBytes = size_t{16} << 20;
constexpr size_t kAlignment = 256;

}  // namespace

IndexUploader::IndexUploader(cudaStream_t stream) : stream_(stream) { Grow(kInitialBytes); }

IndexUploader::~IndexUploader() {
  if (pinned_ != nullptr) cudaFreeHost(pinned_);
  if (device_ != nullptr) cudaFree(device_);
}

void IndexUploader::Grow(size_t bytes) {
  if (pinned_ != nullptr) BATON_CUDA_CHECK(cudaFreeHost(pinned_));
  if (device_ != nullptr) BATON_CUDA_CHECK(cudaFree(device_));
  pinned_ = nullptr;
  device_ = nullptr;
  BATON_CUDA_CHECK(cudaHostAlloc(reinterpret_cast<void**>(&pinned_), bytes, cudaHostAllocDefault));
  BATON_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&device_), bytes));
  capacity_ = bytes;
  used_ = 0;
}

void IndexUploader::Restart() {
  BATON_CUDA_CHECK(cudaStreamSynchronize(stream_));
  used_ = 0;
  recent_.fill({});
  next_recent_ = 0;
}

const void* IndexUploader::FindRecent(const void* host, size_t bytes) const {
  for (const Recent& r : recent_) {
    if (r.bytes == bytes && std::memcmp(pinned_ + r.offset, host, bytes) == 0) {
      return device_ + r.offset;
    }
  }
  return nullptr;
}

const void* IndexUploader::UploadBytes(const void* host, size_t bytes) {
  if (bytes > 0) {
    if (const void* same = FindRecent(host, bytes); same != nullptr) return same;
  }
  const size_t slice = std::max<size_t>(kAlignment, (bytes + kAlignment - 1) / kAlignment *
                                                        kAlignment);
  if (used_ + slice > capacity_) {
    if (!may_wrap_) {
      CudaFailed("IndexUploader", "a recorded step's index arrays outgrew the staging ring",
                 __FILE__, __LINE__);
    }
    BATON_CUDA_CHECK(cudaStreamSynchronize(stream_));  // every earlier slice has been read
    used_ = 0;
    recent_.fill({});
    if (slice > capacity_) Grow(std::max(slice, 2 * capacity_));
  }
  uint8_t* staged = pinned_ + used_;
  uint8_t* device = device_ + used_;
  used_ += slice;
  if (bytes == 0) return device;
  std::memcpy(staged, host, bytes);
  recent_[next_recent_] = {.offset = static_cast<size_t>(staged - pinned_), .bytes = bytes};
  next_recent_ = (next_recent_ + 1) % recent_.size();
  if (!stage_only_) {
    BATON_CUDA_CHECK(cudaMemcpyAsync(device, staged, bytes, cudaMemcpyHostToDevice, stream_));
  }
  return device;
}

}  // namespace baton::kernels::cuda
