#include "kernels/cuda/index_uploader.cuh"

#include "kernels/cuda/cuda_check.cuh"

namespace baton::kernels::cuda {
namespace {

constexpr size_t kInitialBytes = size_t{16} << 20;

}  // namespace

IndexUploader::IndexUploader(cudaStream_t stream)
    : stream_(stream), ring_(*this, kInitialBytes) {}

IndexUploader::~IndexUploader() { Free(); }

void IndexUploader::Free() {
  if (pinned_ != nullptr) BATON_CUDA_CHECK(cudaFreeHost(pinned_));
  if (device_ != nullptr) BATON_CUDA_CHECK(cudaFree(device_));
  pinned_ = nullptr;
  device_ = nullptr;
}

void IndexUploader::WaitIdle() { BATON_CUDA_CHECK(cudaStreamSynchronize(stream_)); }

uint8_t* IndexUploader::Reallocate(size_t bytes) {
  Free();
  BATON_CUDA_CHECK(cudaHostAlloc(reinterpret_cast<void**>(&pinned_), bytes, cudaHostAllocDefault));
  BATON_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&device_), bytes));
  return pinned_;
}

void IndexUploader::EnqueueCopy(size_t offset, size_t bytes) {
  BATON_CUDA_CHECK(cudaMemcpyAsync(device_ + offset, pinned_ + offset, bytes,
                                   cudaMemcpyHostToDevice, stream_));
}

}  // namespace baton::kernels::cuda
