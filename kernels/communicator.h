// The collectives a tensor-parallel group of ranks needs, over the memory its backends compute
// on: an all-reduce (the row-parallel products' partial sums), an all-gather of column blocks
// (the vocabulary-split logits), and point-to-point transfers (the KV hand-off between ranks).
// Implemented over shared memory for ranks on the CPU (kernels/cpu/shared_memory_group.h);
// NCCL's communicator is the one for GPUs.
//
// Every rank of the group makes the same collective calls in the same order with the same
// shapes; a collective returns once this rank's result is in place. Results are the same on
// every rank, bit for bit: an all-reduce sums in rank order (rank 0's value + rank 1's + ...),
// whoever computes it.
//
// Failure: every wait is bounded (the group's timeout); a rank that does not arrive in time,
// or a group that was aborted, fails the call with DEADLINE_EXCEEDED or ABORTED, and every later
// call of the group fails at once the same way: a tensor-parallel step that failed on one rank
// fails on all of them instead of hanging.
//
// Thread-safety: one Communicator per rank, each used by one thread at a time (its rank's
// forward pass); the ranks' communicators are used concurrently.
#ifndef BATON_KERNELS_COMMUNICATOR_H_
#define BATON_KERNELS_COMMUNICATOR_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"

namespace baton::kernels {

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;

  // data f32 [count] becomes the sum over ranks of every rank's data, in rank order.
  virtual absl::Status AllReduceSum(float* data, int64_t count) = 0;
  // out [rows, out_cols] = every rank's in [rows, cols_r] side by side, rank 0's columns first:
  // rank r's block starts at column cols_0 + ... + cols_{r-1}. Ranks may bring different cols;
  // their sum must be out_cols. `in` and `out` must not overlap.
  virtual absl::Status AllGatherColumns(const float* in, int64_t rows, int64_t cols, float* out,
                                        int64_t out_cols) = 0;
  // Sends `bytes` of `data` to rank `peer`, which receives them with a Receive of the same size
  // from this rank; transfers between two ranks arrive in the order they were sent. Returns once
  // `data` may be reused.
  virtual absl::Status Send(int peer, const void* data, size_t bytes) = 0;
  virtual absl::Status Receive(int peer, void* data, size_t bytes) = 0;
};

}  // namespace baton::kernels

#endif  // BATON_KERNELS_COMMUNICATOR_H_
