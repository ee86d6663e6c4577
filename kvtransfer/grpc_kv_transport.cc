// CreateGrpcKvTransport: pushes over PushKv streams (kv_transfer.proto), layers round-robin over
// the push's streams, each layer cut into chunks of whole blocks, which the transport's encoder
// thread (chunk_encoder.h) turns into messages that point at the sender's blocks (block_loans.h).
// See push_assembler.h for how the receiving side puts several streams back together.
#include <algorithm>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "grpcpp/generic/generic_stub.h"
#include "kvtransfer/block_loans.h"
#include "kvtransfer/chunk_encoder.h"
#include "kvtransfer/grpc_push_stream.h"
#include "kvtransfer/kv_transport.h"
#include "kvtransfer/kv_wire.h"
#include "kvtransfer/push_cursor.h"

namespace baton::kvtransfer {
namespace {

// How long Finish waits past the push's deadline for the calls to report before cancelling them.
constexpr absl::Duration kFinishGrace = absl::Seconds(5);

class GrpcKvPush final : public KvPush {
 public:
  // Stream i goes over stubs[i] (one per stream).
  GrpcKvPush(std::vector<std::shared_ptr<grpc::GenericStub>> stubs, ChunkEncoder* encoder,
             const GrpcKvTransportOptions& options, std::string destination,
             const KvPushSpec& spec, int32_t blocks_per_chunk,
             std::chrono::system_clock::time_point deadline)
      : stubs_(std::move(stubs)),
        encoder_(*encoder),
        destination_(std::move(destination)),
        spec_(spec),
        blocks_per_chunk_(blocks_per_chunk),
        deadline_(deadline),
        started_(std::chrono::steady_clock::now()),
        cursor_(spec) {
    const auto n_streams = static_cast<int32_t>(stubs_.size());
    for (int32_t i = 0; i < n_streams; ++i) {
      streams_.push_back(std::make_unique<GrpcPushStream>(
          i,
          [this](int32_t index, const absl::Status& status, const v1::KvPushResponse& r) {
            OnStreamDone(index, status, r);
          },
          [encoder] { encoder->Wake(); }));
    }
    for (int32_t i = 0; i < n_streams; ++i) {
      streams_[i]->Start(stubs_[i].get(), options.client, deadline,
                         HeaderFromSpec(spec, i, n_streams));
    }
  }

  ~GrpcKvPush() override {
    if (!finished_) Cancel();
    // The streams call back into this object until they are done.
    AwaitAllDone(absl::InfiniteFuture());
    ForgetStreams();
  }

  std::string_view transport_name() const override { return "grpc"; }

  void WhenBlocksReleased(std::function<void()> release) override {
    loans_->WhenReturned(std::move(release));  // no new loans: the encoder forgot the streams
  }

  absl::Status SendLayer(int32_t layer, const std::vector<const uint8_t*>& blocks,
                         BlocksReady ready) override {
    if (finished_ || cancelled_) {
      return absl::FailedPreconditionError(absl::StrCat(Where(), " is no longer open"));
    }
    if (absl::Status failed = Failure(); !failed.ok()) return failed;
    if (absl::Status bad = cursor_.CheckSendLayer(layer, blocks); !bad.ok()) {
      Cancel();  // an error means the push has failed: the receiver frees the reservation
      return bad;
    }
    const int32_t begin = cursor_.block();
    const int32_t end = cursor_.range_end();
    GrpcPushStream* stream =
        streams_[StreamOfLayer(layer, static_cast<int32_t>(streams_.size()))].get();
    if (ready) {
      // Blocks that cannot be had fail the push with their reason, whatever the streams report
      // once cancelled. The encoder calls this only while the push lives (ForgetStreams).
      ready = [this, layer, wait = std::move(ready)](
                  std::chrono::system_clock::time_point deadline) {
        absl::Status landed = wait(deadline);
        if (!landed.ok()) {
          RecordFailure(absl::Status(landed.code(), absl::StrCat("layer ", layer, "'s blocks: ",
                                                                 landed.message())));
          CancelStreams();
        }
        return landed;
      };
    }
    // The encoder makes the messages later, on its own thread.
    for (int32_t first = begin; first < end; first += blocks_per_chunk_) {
      const int32_t count = std::min(blocks_per_chunk_, end - first);
      encoder_.Submit(stream, {.layer = layer,
                               .first_block = first,
                               .blocks = {blocks.begin() + (first - begin),
                                          blocks.begin() + (first - begin + count)},
                               .block_bytes = static_cast<size_t>(spec_.layer_block_bytes()),
                               .loans = loans_.get(),
                               .ready = ready,  // copied: shared by the layer's chunks
                               .deadline = deadline_});
      stats_.bytes_sent += spec_.layer_block_bytes() * count;
      ++stats_.chunks_sent;
    }
    cursor_.Advance(end - begin);
    return absl::OkStatus();
  }

  absl::StatusOr<KvPushStats> Finish() override {
    if (finished_ || cancelled_) {
      return absl::FailedPreconditionError(absl::StrCat(Where(), " is no longer open"));
    }
    finished_ = true;
    if (absl::Status failed = Failure(); !failed.ok()) {
      CancelStreams();
      return failed;
    }
    if (!cursor_.done()) {
      CancelStreams();
      return absl::FailedPreconditionError(
          absl::StrCat(Where(), ": Finish before the data of ", cursor_.Describe()));
    }
    // Each stream closes once the encoder has handed it every chunk before the close.
    for (auto& stream : streams_) encoder_.Submit(stream.get(), {.close = true});
    if (!AwaitAllDone(absl::FromChrono(deadline_) + kFinishGrace)) {
      // The calls carry the deadline, so this only happens when gRPC itself is stuck.
      CancelStreams();
      AwaitAllDone(absl::InfiniteFuture());
    }
    ForgetStreams();  // after a failure some chunks may be left unencoded: drop them
    absl::MutexLock lock(&mu_);
    if (!failure_.ok()) return failure_;
    if (!complete_) {
      return absl::InternalError(absl::StrCat(
          Where(), ": every stream ended OK but the receiver never reported the push complete"));
    }
    KvPushStats stats = stats_;
    stats.seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count();
    return stats;
  }

  void Cancel() override {
    {
      absl::MutexLock lock(&mu_);
      if (n_done_ == static_cast<int32_t>(streams_.size()) && failure_.ok() && complete_) {
        return;  // the push succeeded; nothing left to abandon
      }
    }
    cancelled_ = true;
    ForgetStreams();
    CancelStreams();
  }

 private:
  std::string Where() const {
    return absl::StrCat("push to reservation '", spec_.reservation_id, "' at ", destination_);
  }

  bool AllDoneLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return n_done_ == static_cast<int32_t>(streams_.size());
  }

  // True once every stream's call has ended; false when `deadline` came first.
  bool AwaitAllDone(absl::Time deadline) {
    absl::MutexLock lock(&mu_);
    return mu_.AwaitWithDeadline(absl::Condition(this, &GrpcKvPush::AllDoneLocked), deadline);
  }

  absl::Status Failure() {
    absl::MutexLock lock(&mu_);
    return failure_;
  }

  void CancelStreams() {
    for (auto& stream : streams_) stream->Cancel();
  }

  // Once this returns the encoder reads none of the push's blocks any more.
  void ForgetStreams() {
    for (auto& stream : streams_) encoder_.Forget(stream.get());
  }

  // Keeps the push's first failure, prefixed with where it went; true when it is the first.
  bool RecordFailure(const absl::Status& status) {
    absl::MutexLock lock(&mu_);
    if (!failure_.ok()) return false;
    failure_ = absl::Status(status.code(), absl::StrCat(Where(), ": ", status.message()));
    return true;
  }

  void OnStreamDone(int32_t index, const absl::Status& status, const v1::KvPushResponse& response) {
    const bool first_failure =
        !status.ok() &&
        RecordFailure(absl::Status(status.code(), absl::StrCat("stream ", index, " of ",
                                                               streams_.size(), ": ",
                                                               status.message())));
    if (status.ok() && response.push_complete()) {
      absl::MutexLock lock(&mu_);
      complete_ = true;
    }
    // The push is lost: stop the other streams too (a stream's Cancel is safe after its OnDone).
    if (first_failure) CancelStreams();
    // Last: once every stream counts as done, the owner may destroy this object.
    absl::MutexLock lock(&mu_);
    ++n_done_;
  }

  const std::vector<std::shared_ptr<grpc::GenericStub>> stubs_;
  ChunkEncoder& encoder_;
  const std::string destination_;
  const KvPushSpec spec_;
  const int32_t blocks_per_chunk_;
  const std::chrono::system_clock::time_point deadline_;
  const std::chrono::steady_clock::time_point started_;
  std::vector<std::unique_ptr<GrpcPushStream>> streams_;  // fixed after construction
  const std::shared_ptr<BlockLoans> loans_ = BlockLoans::Create();  // the messages' views

  // Used only by the owner's thread (KvPush is single-threaded).
  PushCursor cursor_;
  bool finished_ = false;
  bool cancelled_ = false;
  KvPushStats stats_;

  absl::Mutex mu_;
  int32_t n_done_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Status failure_ ABSL_GUARDED_BY(mu_);  // the first stream error
  bool complete_ ABSL_GUARDED_BY(mu_) = false;
};

class GrpcKvTransport final : public KvTransport {
 public:
  explicit GrpcKvTransport(const GrpcKvTransportOptions& options)
      : options_(options) {}

  std::string_view name() const override { return "grpc"; }

  absl::StatusOr<std::unique_ptr<KvPush>> StartPush(
      const std::string& destination, const KvPushSpec& spec,
      std::chrono::system_clock::time_point deadline) override {
    if (absl::Status valid = ValidateSpec(spec); !valid.ok()) return valid;
    if (options_.n_streams < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("n_streams must be at least 1, got ", options_.n_streams));
    }
    absl::StatusOr<int32_t> blocks_per_chunk = BlocksPerChunk(spec, options_.chunk_bytes);
    if (!blocks_per_chunk.ok()) return blocks_per_chunk.status();
    absl::StatusOr<std::vector<std::shared_ptr<grpc::GenericStub>>> stubs =
        StubsFor(destination, std::min(options_.n_streams, spec.n_layer));
    if (!stubs.ok()) return stubs.status();
    return std::make_unique<GrpcKvPush>(*std::move(stubs), &encoder_, options_, destination, spec,
                                        *blocks_per_chunk, deadline);
  }

 private:
  // The first `n` of the destination's stubs, one per stream, each on a connection of its own:
  // HTTP/2 streams on one connection share one socket, which one thread reads at each end, so
  // several streams only spread a push over several cores when each has its own. The stubs (and
  // their channels) are kept and shared by every push to the destination.
  absl::StatusOr<std::vector<std::shared_ptr<grpc::GenericStub>>> StubsFor(
      const std::string& destination, int32_t n) {
    absl::MutexLock lock(&mu_);
    std::vector<std::shared_ptr<grpc::GenericStub>>& stubs = stubs_[destination];
    while (static_cast<int32_t>(stubs.size()) < n) {
      absl::StatusOr<std::shared_ptr<grpc::Channel>> channel =
          rpc::MakeChannel(destination, options_.client, rpc::Connection::kOwn);
      if (!channel.ok()) return channel.status();
      stubs.push_back(std::make_shared<grpc::GenericStub>(*channel));
    }
    return std::vector<std::shared_ptr<grpc::GenericStub>>(stubs.begin(), stubs.begin() + n);
  }

  const GrpcKvTransportOptions options_;
  ChunkEncoder encoder_;  // outlives every push (pushes are destroyed before their transport)
  absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::vector<std::shared_ptr<grpc::GenericStub>>> stubs_
      ABSL_GUARDED_BY(mu_);
};

}  // namespace

std::unique_ptr<KvTransport> CreateGrpcKvTransport(const GrpcKvTransportOptions& options) {
  return std::make_unique<GrpcKvTransport>(options);
}

}  // namespace baton::kvtransfer
