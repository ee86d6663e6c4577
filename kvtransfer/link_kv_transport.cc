// CreateLinkKvTransport: pushes whose blocks travel over a link (kv_link.h, link_sender.h) and
// whose control messages (header, one announcement per chunk, the outcome) travel on one PushKv
// stream. One link per destination, opened with OpenKvLink on the first push there and again
// once it broke.
#include <algorithm>
#include <chrono>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "baton/v1/kv_transfer.grpc.pb.h"
#include "grpcpp/generic/generic_stub.h"
#include "kvtransfer/grpc_push_stream.h"
#include "kvtransfer/kv_chunk_codec.h"
#include "kvtransfer/kv_link.h"
#include "kvtransfer/kv_transport.h"
#include "kvtransfer/kv_wire.h"
#include "kvtransfer/link_sender.h"
#include "kvtransfer/push_cursor.h"
#include "rpc/status.h"

namespace baton::kvtransfer {
namespace {

// How long Finish and the destructor wait past the push's deadline for the stream and the
// transfers to report.
constexpr absl::Duration kFinishGrace = absl::Seconds(5);

// A push over a link. Abandoning it (Cancel, or a failure on this side that left the link in
// step) half-closes its stream once no transfer of it is in flight: the receiver then fails the
// push without breaking the link, since it has received every transfer announced.
class LinkKvPush final : public KvPush {
 public:
  LinkKvPush(std::shared_ptr<LinkSender> link, std::string_view kind, grpc::GenericStub* stub,
             const rpc::ClientOptions& client, std::string destination, const KvPushSpec& spec,
             std::chrono::system_clock::time_point deadline)
      : link_(std::move(link)),
        kind_(kind),
        destination_(std::move(destination)),
        spec_(spec),
        deadline_(deadline),
        started_(std::chrono::steady_clock::now()),
        cursor_(spec) {
    stream_ = std::make_unique<GrpcPushStream>(
        0,
        [this](int32_t, const absl::Status& status, const v1::KvPushResponse& response) {
          OnStreamDone(status, response);
        },
        [] {});
    v1::KvPushHeader header = HeaderFromSpec(spec, 0, 1);
    header.set_link_id(link_->link_id());
    stream_->Start(stub, client, deadline, header);
  }

  ~LinkKvPush() override {
    if (!finished_) Cancel();
    if (AwaitOver(absl::FromChrono(deadline_) + kFinishGrace)) return;
    // Past the deadline and its grace: only when the link or gRPC is stuck. Breaking the link
    // ends the transfers (the one in flight gives up at once, the queued ones fail).
    stream_->Cancel();
    link_->Break(absl::DeadlineExceededError(Where() + " did not end in time"));
    AwaitOver(absl::InfiniteFuture());
  }

  std::string_view transport_name() const override { return kind_; }
  bool reads_device_memory() const override { return true; }

  absl::Status SendLayer(int32_t layer, const std::vector<const uint8_t*>& blocks,
                         BlocksReady ready) override {
    if (absl::Status failed = Failure(); !failed.ok()) return failed;
    if (finished_ || cancelled_.load()) {
      return absl::FailedPreconditionError(absl::StrCat(Where(), " is no longer open"));
    }
    if (absl::Status bad = cursor_.CheckSendLayer(layer, blocks); !bad.ok()) {
      Abandon(bad);
      return bad;
    }
    const int32_t first = cursor_.block();
    const auto n_blocks = static_cast<int32_t>(blocks.size());
    {
      absl::MutexLock lock(&mu_);
      ++pending_;
    }
    link_->Submit({.blocks = blocks,
                   .block_bytes = static_cast<size_t>(spec_.layer_block_bytes()),
                   .ready = std::move(ready),
                   .deadline = deadline_,
                   .announce = [this, layer, first, n_blocks](uint64_t sequence) {
                     return Announce(layer, first, n_blocks, sequence);
                   },
                   .cancelled = [this] { return cancelled_.load(); },
                   .lost = [this] { return StreamLost(); },
                   .done = [this](const absl::Status& status) { OnTransferDone(status); }});
    stats_.bytes_sent += spec_.layer_block_bytes() * n_blocks;
    ++stats_.chunks_sent;
    cursor_.Advance(n_blocks);
    return Failure();  // a broken link fails the transfer at once
  }

  absl::StatusOr<KvPushStats> Finish() override {
    if (absl::Status failed = Failure(); !failed.ok()) return failed;
    if (finished_ || cancelled_.load()) {
      return absl::FailedPreconditionError(absl::StrCat(Where(), " is no longer open"));
    }
    finished_ = true;
    if (!cursor_.done()) {
      absl::Status early = absl::FailedPreconditionError(
          absl::StrCat(Where(), ": Finish before the data of ", cursor_.Describe()));
      Abandon(early);
      return early;
    }
    const absl::Time until = absl::FromChrono(deadline_) + kFinishGrace;
    absl::MutexLock lock(&mu_);
    mu_.AwaitWithDeadline(absl::Condition(this, &LinkKvPush::TransfersOverLocked), until);
    if (pending_ == 0 && failure_.ok()) CloseLocked();
    if (!mu_.AwaitWithDeadline(absl::Condition(&stream_done_), until)) {
      // The call carries the deadline: only when gRPC itself is stuck. The announcements it
      // drops may leave the ends out of step; the destructor breaks the link.
      if (failure_.ok()) failure_ = absl::DeadlineExceededError(Where() + ": no answer in time");
      return failure_;
    }
    if (!failure_.ok()) return failure_;
    if (!complete_) {
      return absl::InternalError(absl::StrCat(
          Where(), ": the stream ended OK but the receiver never reported the push complete"));
    }
    KvPushStats stats = stats_;
    stats.seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count();
    return stats;
  }

  void Cancel() override {
    {
      absl::MutexLock lock(&mu_);
      if (complete_) return;
    }
    Abandon(absl::CancelledError(absl::StrCat(Where(), " was cancelled")));
  }

  void WhenBlocksReleased(std::function<void()> release) override {
    {
      absl::MutexLock lock(&mu_);
      if (pending_ > 0) {
        release_ = std::move(release);
        return;
      }
    }
    release();
  }

 private:
  std::string Where() const {
    return absl::StrCat("push to reservation '", spec_.reservation_id, "' at ", destination_,
                        " over link ", link_->link_id());
  }

  absl::Status Failure() {
    absl::MutexLock lock(&mu_);
    return failure_;
  }

  bool TransfersOverLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return pending_ == 0 || !failure_.ok();
  }

  bool Announce(int32_t layer, int32_t first_block, int32_t n_blocks, uint64_t sequence) {
    v1::KvPushMessage message;
    v1::KvChunk& chunk = *message.mutable_chunk();
    chunk.set_layer(layer);
    chunk.set_first_block(first_block);
    chunk.set_n_blocks(n_blocks);
    chunk.set_link_sequence(sequence);
    if (stream_->Enqueue(EncodeProtoMessage(message))) return true;
    // The stream ended under the push (this end half-closes only once no transfer is left), so
    // the receiver may hold back transfers announced before: the skip that follows is no
    // abandoning by this end, and the failed stream must break the link.
    absl::MutexLock lock(&mu_);
    stream_ended_under_push_ = true;
    return false;
  }

  bool StreamLost() {
    absl::MutexLock lock(&mu_);
    return call_over_ && !complete_;
  }

  // Stops the push: transfers not yet posted are skipped, and the stream half-closes once none
  // is in flight (the receiver then fails the push, the link in step).
  void Abandon(const absl::Status& why) {
    cancelled_.store(true);
    absl::MutexLock lock(&mu_);
    if (failure_.ok()) failure_ = why;
    if (pending_ == 0) CloseLocked();
  }

  void CloseLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (closed_ || call_over_) return;
    closed_ = true;
    stream_->Close();
  }

  void OnTransferDone(const absl::Status& status) {
    std::function<void()> release;
    {
      absl::MutexLock lock(&mu_);
      --pending_;
      if (!status.ok() && !cancelled_.load()) {
        if (failure_.ok()) {
          failure_ = absl::Status(status.code(), absl::StrCat(Where(), ": ", status.message()));
        }
        cancelled_.store(true);  // the transfers queued behind it are skipped
      }
      if (pending_ == 0) {
        if (cancelled_.load()) CloseLocked();
        release = std::move(release_);
      }
    }
    if (release) release();
  }

  // A stream that fails while the push was not abandoned here may leave announced transfers
  // unreceived (a send can complete before the peer posts its receive, and announcements may be
  // refused or lost): the link is broken, before the push may be destroyed.
  void OnStreamDone(const absl::Status& status, const v1::KvPushResponse& response) {
    bool out_of_step = false;
    {
      absl::MutexLock lock(&mu_);
      if (!status.ok() && failure_.ok()) {
        failure_ = absl::Status(status.code(), absl::StrCat(Where(), ": ", status.message()));
      }
      if (status.ok() && response.push_complete()) complete_ = true;
      call_over_ = true;
      // A push this end abandoned ended with every announced transfer received (the receiver
      // fails it for ending early); any other failure may not have, nor one whose stream an
      // announcement found already over (the skipped transfer then marked the push cancelled).
      out_of_step = !status.ok() && (!cancelled_.load() || stream_ended_under_push_);
    }
    if (out_of_step) link_->Break(status);
    absl::MutexLock lock(&mu_);
    stream_done_ = true;  // last: the owner may destroy the push from here on
  }

  // True once no transfer of the push is pending and its stream has ended; false at `deadline`.
  bool AwaitOver(absl::Time deadline) {
    absl::MutexLock lock(&mu_);
    return mu_.AwaitWithDeadline(
        absl::Condition(
            +[](LinkKvPush* self) ABSL_NO_THREAD_SAFETY_ANALYSIS {
              return self->pending_ == 0 && self->stream_done_;
            },
            this),
        deadline);
  }

  const std::shared_ptr<LinkSender> link_;
  const std::string_view kind_;
  const std::string destination_;
  const KvPushSpec spec_;
  const std::chrono::system_clock::time_point deadline_;
  const std::chrono::steady_clock::time_point started_;
  std::unique_ptr<GrpcPushStream> stream_;  // set in the constructor

  // Used only by the owner's thread (KvPush is single-threaded).
  PushCursor cursor_;
  bool finished_ = false;
  KvPushStats stats_;

  std::atomic<bool> cancelled_{false};  // read by the link's thread
  absl::Mutex mu_;
  int32_t pending_ ABSL_GUARDED_BY(mu_) = 0;  // transfers submitted and not done
  absl::Status failure_ ABSL_GUARDED_BY(mu_);
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  bool call_over_ ABSL_GUARDED_BY(mu_) = false;
  bool stream_ended_under_push_ ABSL_GUARDED_BY(mu_) = false;  // an announcement found it over    // the stream's call has ended: touch it not
  bool stream_done_ ABSL_GUARDED_BY(mu_) = false;  // its callback has returned: may destroy
  bool complete_ ABSL_GUARDED_BY(mu_) = false;
  std::function<void()> release_ ABSL_GUARDED_BY(mu_);
};

// A random link id: 32 hex digits.
std::string NewLinkId() {
  static absl::Mutex mu(absl::kConstInit);
  static std::mt19937_64 random(std::random_device{}());
  absl::MutexLock lock(&mu);
  return absl::StrCat(absl::Hex(random(), absl::kZeroPad16), absl::Hex(random(), absl::kZeroPad16));
}

class LinkKvTransport final : public KvTransport {
 public:
  LinkKvTransport(LinkFactory* factory, const LinkKvTransportOptions& options)
      : factory_(*factory), options_(options) {}

  // Waits for the links being opened (each within options_.connect_timeout).
  ~LinkKvTransport() override {
    absl::MutexLock lock(&mu_);
    for (auto& [destination, peer] : peers_) {
      if (!peer->opener.joinable()) continue;
      mu_.Unlock();  // the opener takes mu_ as it ends
      peer->opener.join();
      mu_.Lock();
    }
  }

  std::string_view name() const override { return factory_.kind(); }

  absl::StatusOr<std::unique_ptr<KvPush>> StartPush(
      const std::string& destination, const KvPushSpec& spec,
      std::chrono::system_clock::time_point deadline) override {
    if (absl::Status valid = ValidateSpec(spec); !valid.ok()) return valid;
    absl::MutexLock lock(&mu_);
    absl::StatusOr<Peer*> found = PeerLocked(destination);
    if (!found.ok()) return found.status();
    Peer& peer = **found;
    if (peer.link == nullptr || peer.link->broken()) {
      if (options_.open_in_background) return OpenInBackgroundLocked(peer, destination);
      absl::StatusOr<std::shared_ptr<LinkSender>> link = Open(peer, destination, deadline);
      if (!link.ok()) return link.status();
      peer.link = *std::move(link);
    }
    return std::make_unique<LinkKvPush>(peer.link, factory_.kind(), peer.push_stub.get(),
                                        options_.client, destination, spec, deadline);
  }

 private:
  struct Peer {
    std::unique_ptr<v1::KvTransfer::Stub> stub;     // OpenKvLink
    std::unique_ptr<grpc::GenericStub> push_stub;   // PushKv, raw
    std::shared_ptr<LinkSender> link;               // null until the first push
    // Opening in the background (options.open_in_background):
    bool opening = false;
    absl::Status open_failure;  // why the last one failed; reported to the next push
    std::thread opener;
  };

  absl::StatusOr<Peer*> PeerLocked(const std::string& destination)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    auto it = peers_.find(destination);
    if (it != peers_.end()) return it->second.get();
    absl::StatusOr<std::shared_ptr<grpc::Channel>> channel =
        rpc::MakeChannel(destination, options_.client, rpc::Connection::kOwn);
    if (!channel.ok()) return channel.status();
    auto peer = std::make_unique<Peer>();
    peer->stub = v1::KvTransfer::NewStub(*channel);
    peer->push_stub = std::make_unique<grpc::GenericStub>(*channel);
    return (peers_[destination] = std::move(peer)).get();
  }

  // No link to push over yet: FAILED_PRECONDITION with why the last opening failed (once), else
  // UNAVAILABLE while one opens (starting it when none does).
  absl::Status OpenInBackgroundLocked(Peer& peer, const std::string& destination)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (!peer.open_failure.ok()) {
      const absl::Status failed = absl::FailedPreconditionError(peer.open_failure.message());
      peer.open_failure = absl::OkStatus();
      return failed;
    }
    if (!peer.opening) {
      if (peer.opener.joinable()) peer.opener.join();  // it has ended: opening is false
      peer.opening = true;
      peer.opener = std::thread([this, &peer, destination] {
        absl::StatusOr<std::shared_ptr<LinkSender>> link = Open(
            peer, destination, std::chrono::system_clock::now() + options_.connect_timeout);
        absl::MutexLock lock(&mu_);
        peer.opening = false;
        if (link.ok()) {
          peer.link = *std::move(link);
        } else {
          peer.open_failure = link.status();
        }
      });
    }
    return absl::UnavailableError(absl::StrCat("the ", std::string(factory_.kind()),
                                               " link to ", destination, " is being opened"));
  }

  // A new link to `destination`: this end offered, the receiver's end accepted (OpenKvLink), both
  // connected; all of it by the push's deadline and options_.connect_timeout. The receiver's
  // UNIMPLEMENTED / FAILED_PRECONDITION when it takes no such links.
  absl::StatusOr<std::shared_ptr<LinkSender>> Open(Peer& peer, const std::string& destination,
                                                   std::chrono::system_clock::time_point deadline) {
    deadline = std::min(deadline, std::chrono::system_clock::now() + options_.connect_timeout);
    v1::OpenKvLinkRequest request;
    request.set_link_id(NewLinkId());
    request.set_kind(std::string(factory_.kind()));
    absl::StatusOr<std::unique_ptr<LinkEndpoint>> endpoint =
        factory_.Offer(request.mutable_bootstrap());
    if (!endpoint.ok()) return endpoint.status();
    grpc::ClientContext context;
    rpc::PrepareContext(context, options_.client, deadline);
    v1::OpenKvLinkResponse response;
    absl::Status opened = rpc::FromGrpcStatus(peer.stub->OpenKvLink(&context, request, &response));
    if (opened.ok()) opened = (*endpoint)->AwaitConnected(absl::FromChrono(deadline));
    if (!opened.ok()) {
      return absl::Status(opened.code(), absl::StrCat("opening a ", std::string(factory_.kind()),
                                                      " link to ", destination, ": ",
                                                      opened.message()));
    }
    return std::make_shared<LinkSender>(request.link_id(), *std::move(endpoint));
  }

  LinkFactory& factory_;
  const LinkKvTransportOptions options_;
  // Held while a link opens in the foreground: pushes wait for it rather than open their own.
  absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::unique_ptr<Peer>> peers_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

std::unique_ptr<KvTransport> CreateLinkKvTransport(LinkFactory* factory,
                                                   const LinkKvTransportOptions& options) {
  return std::make_unique<LinkKvTransport>(factory, options);
}

}  // namespace baton::kvtransfer
