#include "kvtransfer/kv_transfer_service.h"

#include <algorithm>
#include <chrono>
#include <memory>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "baton/v1/kv_transfer.grpc.pb.h"
#include "kvtransfer/kv_chunk_codec.h"
#include "kvtransfer/kv_wire.h"
#include "kvtransfer/push_assembler.h"
#include "rpc/status.h"

namespace baton::kvtransfer {
namespace {

// One PushKv stream: joins the push its header names, verifies each chunk and offers it to the
// push's assembler. Messages are read raw (kv_chunk_codec.h): a chunk's data stays in the
// buffers gRPC received it into until the receiver copies it into its blocks. Reads one message
// at a time; while the assembler holds a parked chunk no read is outstanding, and the
// assembler's Wake resumes (or finishes) the stream.
// Once the sender half-closes, the stream answers with the outcome of the whole push, waiting
// (parked, nothing outstanding) for the other streams when needed. Deletes itself in OnDone.
class PushKvReactor final : public grpc::ServerReadReactor<grpc::ByteBuffer>,
                            public KvStreamWaiter {
 public:
  PushKvReactor(grpc::CallbackServerContext* context, grpc::ByteBuffer* response,
                PushRegistry* registry)
      : context_(context), response_(response), registry_(registry) {
    StartRead(&message_);
  }

  void OnReadDone(bool ok) override {
    // Messages the transport had buffered can still be read after the call was cancelled (say
    // its deadline passed while the receiver was slow); the sender has given up, so stop.
    if (!ok || context_->IsCancelled()) {
      OnStreamEnd();
      return;
    }
    absl::StatusOr<ReceivedMessage> message = DecodePushMessage(message_);
    message_.Clear();
    std::shared_ptr<PushAssembler> push = Push();
    if (push == nullptr) {
      Join(message);
      return;
    }
    absl::Status bad = message.status();
    if (bad.ok() && !message->chunk.has_value()) {
      bad = absl::InvalidArgumentError(absl::StrCat(
          "stream ", stream_index_, ": every message after the header must be a chunk"));
    } else if (bad.ok()) {
      bad = push->over_link() ? VerifyLinkChunk(*message->chunk)
                              : VerifyChunk(*message->chunk, push->spec().layer_block_bytes());
    }
    KvStreamWakeups wakeups;
    if (!bad.ok()) {
      push->BreakStream(stream_index_, bad, &wakeups);
      RunWakeups(wakeups);
      FinishOnce(rpc::ToGrpcStatus(bad));
      return;
    }
    bytes_received_ += message->chunk->data_bytes;
    absl::StatusOr<bool> parked =
        push->Offer(stream_index_, this, *std::move(message->chunk), &wakeups);
    // Once parked, another thread may already have woken this stream: touch nothing after this
    // but the locals.
    RunWakeups(wakeups);
    if (!parked.ok()) {
      FinishOnce(rpc::ToGrpcStatus(parked.status()));
    } else if (!*parked) {
      StartRead(&message_);
    }
  }

  void Wake(const absl::Status& status) override {
    if (!status.ok()) {
      FinishOnce(rpc::ToGrpcStatus(status));
    } else if (ending_) {
      FinishComplete();
    } else {
      StartRead(&message_);
    }
  }

  void OnCancel() override {
    std::shared_ptr<PushAssembler> push = Push();
    if (push == nullptr) return;  // the outstanding read fails and finishes the stream
    KvStreamWakeups wakeups;
    const bool was_parked = push->BreakStream(stream_index_, CancelledWhy(), &wakeups);
    RunWakeups(wakeups);
    if (was_parked) FinishOnce(grpc::Status(grpc::StatusCode::CANCELLED, "stream cancelled"));
  }

  void OnDone() override { delete this; }

 private:
  std::shared_ptr<PushAssembler> Push() {
    absl::MutexLock lock(&mu_);
    return push_;
  }

  absl::Status CancelledWhy() const {
    return absl::CancelledError(absl::StrCat("stream ", stream_index_,
                                             " broke off before the push completed (sender "
                                             "cancelled, deadline passed or connection lost)"));
  }

  void Join(const absl::StatusOr<ReceivedMessage>& message) {
    if (!message.ok()) {
      FinishOnce(rpc::ToGrpcStatus(message.status()));
      return;
    }
    if (!message->header.has_value()) {
      FinishOnce(
          grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "first message must be a header"));
      return;
    }
    absl::StatusOr<PushHeaderInfo> info = ParseHeader(*message->header);
    if (!info.ok()) {
      FinishOnce(rpc::ToGrpcStatus(info.status()));
      return;
    }
    const std::chrono::system_clock::time_point deadline = context_->deadline();
    absl::StatusOr<std::shared_ptr<PushAssembler>> push =
        registry_->Join(*info, deadline == std::chrono::system_clock::time_point::max()
                                   ? absl::InfiniteFuture()
                                   : absl::FromChrono(deadline));
    if (!push.ok()) {
      FinishOnce(rpc::ToGrpcStatus(push.status()));
      return;
    }
    {
      absl::MutexLock lock(&mu_);
      stream_index_ = info->stream_index;
      push_ = *std::move(push);
    }
    // A cancellation that raced the join found no push; make sure the push hears of it.
    if (context_->IsCancelled()) {
      OnStreamEnd();
      return;
    }
    StartRead(&message_);
  }

  // The read loop ended: the sender half-closed, or the stream broke.
  void OnStreamEnd() {
    std::shared_ptr<PushAssembler> push = Push();
    KvStreamWakeups wakeups;
    if (context_->IsCancelled()) {
      if (push != nullptr) push->BreakStream(stream_index_, CancelledWhy(), &wakeups);
      RunWakeups(wakeups);
      FinishOnce(grpc::Status(grpc::StatusCode::CANCELLED, "stream cancelled"));
      return;
    }
    if (push == nullptr) {
      FinishOnce(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                              "first message must be a header (stream ended without one)"));
      return;
    }
    ending_ = true;  // before EndStream: a Wake may come as soon as it parks the stream
    absl::StatusOr<bool> parked = push->EndStream(stream_index_, this, &wakeups);
    // Once parked, another thread may already have woken this stream: touch nothing after this
    // but the locals.
    RunWakeups(wakeups);
    if (!parked.ok()) {
      FinishOnce(rpc::ToGrpcStatus(parked.status()));
    } else if (!*parked) {
      FinishComplete();
    }
  }

  // The whole push arrived and the receiver accepted it.
  void FinishComplete() {
    v1::KvPushResponse response;
    response.set_bytes_received(bytes_received_);
    response.set_layers_complete(Push()->spec().n_layer);
    response.set_push_complete(true);
    *response_ = EncodeProtoMessage(response);
    FinishOnce(grpc::Status::OK);
  }

  void FinishOnce(const grpc::Status& status) {
    {
      absl::MutexLock lock(&mu_);
      if (finished_) return;
      finished_ = true;
    }
    Finish(status);
  }

  grpc::CallbackServerContext* const context_;
  grpc::ByteBuffer* const response_;  // a KvPushResponse
  PushRegistry* const registry_;
  grpc::ByteBuffer message_;    // the read in flight (a KvPushMessage); only the read loop

  int64_t bytes_received_ = 0;  // read loop only
  bool ending_ = false;  // the sender half-closed; set before the push can wake the stream for it

  absl::Mutex mu_;  // OnCancel runs concurrently with the read loop
  std::shared_ptr<PushAssembler> push_ ABSL_GUARDED_BY(mu_);
  int32_t stream_index_ = 0;  // written before push_ is published, under mu_
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
};

// How long OpenKvLink waits for the two ends to connect at most, and how many may wait at once
// (each holds a gRPC thread meanwhile).
constexpr absl::Duration kMaxLinkConnectWait = absl::Seconds(60);
constexpr int kMaxLinkOpensAtOnce = 4;

using KvTransferBase = v1::KvTransfer::WithCallbackMethod_OpenKvLink<
    v1::KvTransfer::WithRawCallbackMethod_PushKv<v1::KvTransfer::Service>>;

// PushKv served raw: the reactor decodes the messages itself (kv_chunk_codec.h).
class KvTransferService final : public KvTransferBase {
 public:
  KvTransferService(KvReceiver* receiver, LinkAcceptor* links)
      : links_(links), registry_(receiver, links) {}

  grpc::ServerUnaryReactor* OpenKvLink(grpc::CallbackServerContext* context,
                                       const v1::OpenKvLinkRequest* request,
                                       v1::OpenKvLinkResponse* /*response*/) override {
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    reactor->Finish(rpc::ToGrpcStatus(Open(*request, context->deadline())));
    return reactor;
  }

  grpc::ServerReadReactor<grpc::ByteBuffer>* PushKv(grpc::CallbackServerContext* context,
                                                    grpc::ByteBuffer* response) override {
    return new PushKvReactor(context, response, &registry_);
  }

 private:
  absl::Status Open(const v1::OpenKvLinkRequest& request,
                    std::chrono::system_clock::time_point call_deadline) {
    if (links_ == nullptr) {
      return absl::UnimplementedError(
          "this worker takes no KV over links (its KV cache is not on a device that has them, "
          "or this build has no NCCL): push the data in the messages");
    }
    {
      absl::MutexLock lock(&mu_);
      if (opening_ >= kMaxLinkOpensAtOnce) {
        return absl::ResourceExhaustedError(absl::StrCat(
            kMaxLinkOpensAtOnce, " links are being opened already; try again shortly"));
      }
      ++opening_;
    }
    absl::Time deadline = absl::Now() + kMaxLinkConnectWait;
    if (call_deadline != std::chrono::system_clock::time_point::max()) {
      deadline = std::min(deadline, absl::FromChrono(call_deadline));
    }
    absl::Status opened = links_->Open(request, deadline);
    absl::MutexLock lock(&mu_);
    --opening_;
    return opened;
  }

  LinkAcceptor* const links_;
  PushRegistry registry_;
  absl::Mutex mu_;
  int opening_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace

std::unique_ptr<grpc::Service> CreateKvTransferService(KvReceiver* receiver,
                                                       LinkAcceptor* links) {
  return std::make_unique<KvTransferService>(receiver, links);
}

}  // namespace baton::kvtransfer
