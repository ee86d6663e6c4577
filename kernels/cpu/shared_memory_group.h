// A tensor-parallel group whose ranks are threads of one process on the CPU: the Communicator of
// each rank (kernels/communicator.h) works on the ranks' host memory directly.
//
// A collective publishes each rank's buffer, meets the others at a barrier, computes, and meets
// them again before it returns (so no rank overwrites a buffer another still reads). The
// all-reduce has every rank add all ranks' values itself, in rank order, into a buffer of its own:
// the same bits on every rank, and two barriers a call (a reduce-scatter would read less but
// meet three times; at a decode step's sizes the meetings are what costs). A send copies the
// bytes into the receiver's mailbox and returns.
//
// Thread-safety: communicator(r) is used by rank r's thread; Abort from any thread.
#ifndef BATON_KERNELS_CPU_SHARED_MEMORY_GROUP_H_
#define BATON_KERNELS_CPU_SHARED_MEMORY_GROUP_H_

#include <cstdint>
#include <deque>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "kernels/communicator.h"

namespace baton::kernels {

struct SharedMemoryGroupOptions {
  int size = 1;  // ranks
  // The longest a rank waits for the others at a collective or for a message.
  absl::Duration timeout = absl::Seconds(60);
};

class SharedMemoryGroup {
 public:
  // INVALID_ARGUMENT for a size below 1 or a timeout that is not positive.
  static absl::StatusOr<std::unique_ptr<SharedMemoryGroup>> Create(
      const SharedMemoryGroupOptions& options);
  ~SharedMemoryGroup();
  SharedMemoryGroup(const SharedMemoryGroup&) = delete;
  SharedMemoryGroup& operator=(const SharedMemoryGroup&) = delete;

  int size() const { return size_; }
  // Rank r's communicator (0 <= r < size()), owned by the group.
  Communicator& communicator(int r);
  // Fails every call in progress and every later one with ABORTED, saying `why`.
  void Abort(absl::string_view why);
  // Forgets a failure, the ranks counted at a barrier and the messages not received: the group
  // as new. Only while no rank is inside a call (after every rank has returned from a failed
  // step).
  void Reset();

 private:
  class Rank;
  // What a rank brings to a collective.
  struct Slot {
    const float* in = nullptr;
    int64_t count = 0;  // elements (all-reduce) or columns (all-gather)
    int64_t rows = 0;
  };

  explicit SharedMemoryGroup(const SharedMemoryGroupOptions& options);
  // Waits until every rank has arrived (bounded by the timeout). After the first failure every
  // call returns it.
  absl::Status Barrier(int rank);
  absl::Status AllReduceSum(int rank, float* data, int64_t count, std::vector<float>& sum);
  absl::Status AllGatherColumns(int rank, const float* in, int64_t rows, int64_t cols, float* out,
                                int64_t out_cols);
  absl::Status Send(int from, int to, const void* data, size_t bytes);
  absl::Status Receive(int to, int from, void* data, size_t bytes);
  absl::Status CheckPeer(int rank, int peer) const;
  // Fails the group (the first failure stays) and returns its status.
  absl::Status Fail(absl::Status status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const int size_;
  const absl::Duration timeout_;
  std::vector<std::unique_ptr<Rank>> ranks_;
  // Written by each rank for its own index before a barrier, read by all after it.
  std::vector<Slot> slots_;

  absl::Mutex mu_;
  absl::Status status_ ABSL_GUARDED_BY(mu_);
  int arrived_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t generation_ ABSL_GUARDED_BY(mu_) = 0;
  // mailboxes_[from * size + to]: messages sent and not yet received, oldest first.
  std::vector<std::deque<std::vector<uint8_t>>> mailboxes_ ABSL_GUARDED_BY(mu_);
};

}  // namespace baton::kernels

#endif  // BATON_KERNELS_CPU_SHARED_MEMORY_GROUP_H_
