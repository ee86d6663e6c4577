// One end of an NCCL link (nccl_link_factory.h): a communicator of two ranks, non-blocking, with
// a stream and an event of its own on the worker's GPU. Posting a transfer queues one ncclSend
// (or ncclRecv) per run of blocks that follow one another in memory, in one group; the event
// recorded behind them tells Idle when they are complete.
//
// Thread-safety: as LinkEndpoint (kv_link.h); every NCCL and CUDA call is made under one mutex,
// so Abort never frees the communicator under a call in progress.
#ifndef BATON_KVTRANSFER_NCCL_NCCL_ENDPOINT_H_
#define BATON_KVTRANSFER_NCCL_NCCL_ENDPOINT_H_

#include <cuda_runtime.h>
#include <nccl.h>

#include <memory>
#include <span>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "kvtransfer/kv_link.h"
#include "kvtransfer/nccl/nccl_library.h"

namespace baton::kvtransfer::nccl {

class NcclEndpoint final : public LinkEndpoint {
 public:
  // Starts joining the communicator `id` as `rank` (0: sender, 1: receiver) on GPU `device`;
  // AwaitConnected waits for the other rank. UNAVAILABLE naming the CUDA or NCCL error.
  static absl::StatusOr<std::unique_ptr<NcclEndpoint>> Start(const NcclLibrary& nccl, int device,
                                                             const ncclUniqueId& id, int rank);
  ~NcclEndpoint() override;

  absl::Status AwaitConnected(absl::Time deadline) override;
  absl::Status PostSend(std::span<const uint8_t* const> blocks, size_t block_bytes) override;
  absl::Status PostReceive(std::span<uint8_t* const> blocks, size_t block_bytes) override;
  absl::StatusOr<bool> Idle() override;
  void Abort() override;

 private:
  NcclEndpoint(const NcclLibrary& nccl, int device, int rank)
      : nccl_(nccl), device_(device), peer_(1 - rank) {}
  // Queues one group of sends or receives of the runs of `blocks`.
  absl::Status Post(std::span<uint8_t* const> blocks, size_t block_bytes, bool send);
  // The communicator's state: OK, still in progress (false), or its error.
  absl::StatusOr<bool> SettledLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Waits (at most until `deadline`) for a non-blocking call to settle.
  absl::Status AwaitSettledLocked(absl::Time deadline) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void AbortLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const NcclLibrary& nccl_;
  const int device_;
  const int peer_;
  absl::Mutex mu_;
  ncclComm_t comm_ ABSL_GUARDED_BY(mu_) = nullptr;
  cudaStream_t stream_ ABSL_GUARDED_BY(mu_) = nullptr;
  cudaEvent_t posted_ ABSL_GUARDED_BY(mu_) = nullptr;  // recorded behind the last transfer
  bool aborted_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace baton::kvtransfer::nccl

#endif  // BATON_KVTRANSFER_NCCL_NCCL_ENDPOINT_H_
