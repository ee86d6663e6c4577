// Memory for encoded KV chunks, recycled. A fresh chunk-sized allocation comes from mmap, and
// the kernel faults in and zeroes every page of it on first touch: that, not the network, bounded
// the gRPC push's throughput (the encoder thread spent most of its time there). A buffer goes
// back to the pool when gRPC drops the last reference to the slice that carries it, and stays
// mapped for the next chunk.
//
// Thread-safety: thread-safe. The pool lives until it is released and every buffer it lent has
// come back (each lent buffer holds a reference).
#ifndef BATON_KVTRANSFER_CHUNK_BUFFER_POOL_H_
#define BATON_KVTRANSFER_CHUNK_BUFFER_POOL_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "grpc/slice.h"

namespace baton::kvtransfer {

class ChunkBufferPool : public std::enable_shared_from_this<ChunkBufferPool> {
 public:
  // Buffers of `buffer_bytes`; at most `max_idle` of them are kept while unused.
  static std::shared_ptr<ChunkBufferPool> Create(size_t buffer_bytes, int max_idle);

  // A slice of `bytes` (its contents undefined) for the caller to fill before handing it to
  // gRPC. From the pool when `bytes` fits a buffer and is large enough to be worth it (at least
  // an eighth of one); otherwise a plain allocation.
  grpc_slice Take(size_t bytes);

  int idle() const;

 private:
  ChunkBufferPool(size_t buffer_bytes, int max_idle)
      : buffer_bytes_(buffer_bytes), max_idle_(max_idle) {}
  struct Lease;
  static void Return(void* lease);

  const size_t buffer_bytes_;
  const int max_idle_;
  mutable absl::Mutex mu_;
  std::vector<std::unique_ptr<uint8_t[]>> idle_ ABSL_GUARDED_BY(mu_);
};

}  // namespace baton::kvtransfer

#endif  // BATON_KVTRANSFER_CHUNK_BUFFER_POOL_H_
