// Views of a push's blocks lent to gRPC. The gRPC transport sends a chunk's data straight from
// block memory: each message's data slices point into the blocks instead of holding a copy.
// gRPC keeps those slices until the bytes are written to the socket (or the call is gone and
// its connection has let go of them), which may be after the call ends. Every slice is counted
// out here and back when gRPC drops it, so the push can say when its blocks may change or go.
//
// Thread-safety: thread-safe. A BlockLoans lives as long as any slice lent from it.
#ifndef BATON_KVTRANSFER_BLOCK_LOANS_H_
#define BATON_KVTRANSFER_BLOCK_LOANS_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <span>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "grpcpp/support/slice.h"

namespace baton::kvtransfer {

class BlockLoans : public std::enable_shared_from_this<BlockLoans> {
 public:
  static std::shared_ptr<BlockLoans> Create();

  // A slice over `bytes` (not copied: they must stay as they are while it lives), counted out
  // until gRPC drops its last reference to it.
  grpc::Slice Lend(std::span<const uint8_t> bytes);

  // Calls `then` once every slice lent has come back: at once, on this thread, when none is out;
  // otherwise on the thread where gRPC drops the last one. Once per BlockLoans, after the last
  // Lend.
  void WhenReturned(std::function<void()> then);

  // Slices out now.
  int64_t out() const;

 private:
  BlockLoans() = default;
  static void Return(void* loan);

  mutable absl::Mutex mu_;
  int64_t out_ ABSL_GUARDED_BY(mu_) = 0;
  std::function<void()> when_returned_ ABSL_GUARDED_BY(mu_);
};

}  // namespace baton::kvtransfer

#endif  // BATON_KVTRANSFER_BLOCK_LOANS_H_
