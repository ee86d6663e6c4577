#include "kvtransfer/nccl/nccl_endpoint.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/log.h"

namespace baton::kvtransfer::nccl {
namespace {

absl::Status CudaError(const char* what, cudaError_t error) {
  return absl::UnavailableError(absl::StrCat("CUDA ", what, ": ", cudaGetErrorString(error)));
}

// A non-blocking group call settles within milliseconds; a bound all the same.
constexpr absl::Duration kPostSettleTimeout = absl::Seconds(10);
// How long an abort waits for the link's stream to drain.
constexpr absl::Duration kAbortDrainTimeout = absl::Seconds(10);

// Makes `device` current for the calling thread (a gRPC or link thread, which may compute on
// nothing else, but in a process with two devices might) and restores the previous one.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    if (cudaGetDevice(&previous_) != cudaSuccess) previous_ = -1;
    status_ = cudaSetDevice(device);
  }
  ~DeviceGuard() {
    if (previous_ >= 0) cudaSetDevice(previous_);
  }
  cudaError_t status() const { return status_; }

 private:
  int previous_ = -1;
  cudaError_t status_ = cudaSuccess;
};

struct Run {
  uint8_t* start;
  size_t bytes;
};

// The blocks as runs of neighbours in memory.
std::vector<Run> Runs(std::span<uint8_t* const> blocks, size_t block_bytes) {
  std::vector<Run> runs;
  for (uint8_t* block : blocks) {
    if (!runs.empty() && runs.back().start + runs.back().bytes == block) {
      runs.back().bytes += block_bytes;
    } else {
      runs.push_back({block, block_bytes});
    }
  }
  return runs;
}

}  // namespace

absl::StatusOr<std::unique_ptr<NcclEndpoint>> NcclEndpoint::Start(const NcclLibrary& nccl,
                                                                  int device,
                                                                  const ncclUniqueId& id,
                                                                  int rank) {
  std::unique_ptr<NcclEndpoint> endpoint(new NcclEndpoint(nccl, device, rank));
  absl::MutexLock lock(&endpoint->mu_);
  const DeviceGuard on_device(device);
  if (cudaError_t e = on_device.status(); e != cudaSuccess) return CudaError("device", e);
  if (cudaError_t e = cudaStreamCreateWithFlags(&endpoint->stream_, cudaStreamNonBlocking);
      e != cudaSuccess) {
    return CudaError("stream", e);
  }
  if (cudaError_t e = cudaEventCreateWithFlags(&endpoint->posted_, cudaEventDisableTiming);
      e != cudaSuccess) {
    return CudaError("event", e);
  }
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;  // every call returns at once; waits are ours, with deadlines
  const ncclResult_t started =
      nccl.CommInitRankConfig(&endpoint->comm_, 2, id, rank, &config);
  if (started != ncclSuccess && started != ncclInProgress) {
    endpoint->comm_ = nullptr;
    return nccl.Error("communicator", started);
  }
  return endpoint;
}

NcclEndpoint::~NcclEndpoint() {
  absl::MutexLock lock(&mu_);
  AbortLocked();
  const DeviceGuard on_device(device_);
  if (posted_ != nullptr) cudaEventDestroy(posted_);
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
}

absl::StatusOr<bool> NcclEndpoint::SettledLocked() {
  if (aborted_ || comm_ == nullptr) return absl::UnavailableError("NCCL link aborted");
  ncclResult_t state = ncclSuccess;
  if (ncclResult_t r = nccl_.CommGetAsyncError(comm_, &state); r != ncclSuccess) {
    return nccl_.Error("state", r, comm_);
  }
  if (state == ncclInProgress) return false;
  if (state != ncclSuccess) return nccl_.Error("communicator", state, comm_);
  return true;
}

absl::Status NcclEndpoint::AwaitSettledLocked(absl::Time deadline) {
  while (true) {
    absl::StatusOr<bool> settled = SettledLocked();
    if (!settled.ok()) return settled.status();
    if (*settled) return absl::OkStatus();
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError("NCCL did not settle in time (the peer is not there)");
    }
    mu_.Unlock();  // Abort may come meanwhile; SettledLocked then says so
    absl::SleepFor(absl::Microseconds(100));
    mu_.Lock();
  }
}

absl::Status NcclEndpoint::AwaitConnected(absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  absl::Status connected = AwaitSettledLocked(deadline);
  if (!connected.ok()) AbortLocked();
  return connected;
}

absl::Status NcclEndpoint::PostSend(std::span<const uint8_t* const> blocks, size_t block_bytes) {
  // ncclSend takes a const buffer; one path serves both directions.
  std::vector<uint8_t*> mutable_blocks(blocks.size());
  for (size_t i = 0; i < blocks.size(); ++i) mutable_blocks[i] = const_cast<uint8_t*>(blocks[i]);
  return Post(mutable_blocks, block_bytes, /*send=*/true);
}

absl::Status NcclEndpoint::PostReceive(std::span<uint8_t* const> blocks, size_t block_bytes) {
  return Post(blocks, block_bytes, /*send=*/false);
}

absl::Status NcclEndpoint::Post(std::span<uint8_t* const> blocks, size_t block_bytes, bool send) {
  absl::MutexLock lock(&mu_);
  if (aborted_ || comm_ == nullptr) return absl::UnavailableError("NCCL link aborted");
  const DeviceGuard on_device(device_);
  if (cudaError_t e = on_device.status(); e != cudaSuccess) return CudaError("device", e);
  absl::Status queued;
  if (ncclResult_t r = nccl_.GroupStart(); r != ncclSuccess) {
    queued = nccl_.Error("group start", r, comm_);
  }
  for (const Run& run : Runs(blocks, block_bytes)) {
    if (!queued.ok()) break;
    const ncclResult_t r =
        send ? nccl_.Send(run.start, run.bytes, ncclUint8, peer_, comm_, stream_)
             : nccl_.Recv(run.start, run.bytes, ncclUint8, peer_, comm_, stream_);
    if (r != ncclSuccess) queued = nccl_.Error(send ? "send" : "receive", r, comm_);
  }
  // The group ends whatever happened in it.
  const ncclResult_t ended = nccl_.GroupEnd();
  if (queued.ok() && ended != ncclSuccess && ended != ncclInProgress) {
    queued = nccl_.Error("group end", ended, comm_);
  }
  if (queued.ok()) queued = AwaitSettledLocked(absl::Now() + kPostSettleTimeout);
  if (queued.ok()) {
    if (cudaError_t e = cudaEventRecord(posted_, stream_); e != cudaSuccess) {
      queued = CudaError("event record", e);
    }
  }
  if (!queued.ok()) AbortLocked();
  return queued;
}

absl::StatusOr<bool> NcclEndpoint::Idle() {
  absl::MutexLock lock(&mu_);
  absl::StatusOr<bool> settled = SettledLocked();
  if (!settled.ok()) return settled.status();
  const cudaError_t query = cudaEventQuery(posted_);
  if (query == cudaSuccess) return true;
  if (query == cudaErrorNotReady) return false;
  return CudaError("transfer", query);
}

void NcclEndpoint::Abort() {
  absl::MutexLock lock(&mu_);
  AbortLocked();
}

void NcclEndpoint::AbortLocked() {
  if (aborted_) return;
  aborted_ = true;
  if (comm_ == nullptr) return;
  const DeviceGuard on_device(device_);
  // Ends the kernels in flight. NCCL does not promise the stream is quiet once it returns, so
  // the stream is drained too (bounded): only then are the transfers' blocks untouched.
  if (ncclResult_t r = nccl_.CommAbort(comm_); r != ncclSuccess) {
    BATON_LOG(ERROR) << "NCCL link abort: " << nccl_.GetErrorString(r);
  }
  comm_ = nullptr;
  const absl::Time until = absl::Now() + kAbortDrainTimeout;
  while (cudaStreamQuery(stream_) == cudaErrorNotReady && absl::Now() < until) {
    absl::SleepFor(absl::Microseconds(200));
  }
  if (cudaStreamQuery(stream_) == cudaErrorNotReady) {
    BATON_LOG(ERROR) << "NCCL link abort: its stream still runs after "
                     << absl::FormatDuration(kAbortDrainTimeout);
  }
}

}  // namespace baton::kvtransfer::nccl
