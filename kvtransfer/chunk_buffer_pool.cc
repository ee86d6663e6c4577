#include "kvtransfer/chunk_buffer_pool.h"

#include <utility>

namespace baton::kvtransfer {

// What a lent buffer carries back: the buffer, and a reference that keeps the pool alive.
struct ChunkBufferPool::Lease {
  std::shared_ptr<ChunkBufferPool> pool;
  std::unique_ptr<uint8_t[]> buffer;
};

std::shared_ptr<ChunkBufferPool> ChunkBufferPool::Create(size_t buffer_bytes, int max_idle) {
  return std::shared_ptr<ChunkBufferPool>(new ChunkBufferPool(buffer_bytes, max_idle));
}

grpc_slice ChunkBufferPool::Take(size_t bytes) {
  if (bytes > buffer_bytes_ || bytes < buffer_bytes_ / 8) return grpc_slice_malloc(bytes);
  auto lease = new Lease{shared_from_this(), nullptr};
  {
    absl::MutexLock lock(&mu_);
    if (!idle_.empty()) {
      lease->buffer = std::move(idle_.back());
      idle_.pop_back();
    }
  }
  if (lease->buffer == nullptr) lease->buffer.reset(new uint8_t[buffer_bytes_]);
  return grpc_slice_new_with_user_data(lease->buffer.get(), bytes, &ChunkBufferPool::Return,
                                       lease);
}

void ChunkBufferPool::Return(void* lease_pointer) {
  std::unique_ptr<Lease> lease(static_cast<Lease*>(lease_pointer));
  ChunkBufferPool& pool = *lease->pool;
  {
    absl::MutexLock lock(&pool.mu_);
    if (static_cast<int>(pool.idle_.size()) < pool.max_idle_) {
      pool.idle_.push_back(std::move(lease->buffer));
    }
  }
  // `lease` goes last: its reference may be the one keeping the pool alive.
}

int ChunkBufferPool::idle() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(idle_.size());
}

}  // namespace baton::kvtransfer
