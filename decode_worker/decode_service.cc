#include "decode_worker/decode_service.h"

#include <deque>
#include <memory>

#include "absl/strings/str_cat.h"
#include "rpc/finish_reason_proto.h"
#include "rpc/sampling_params_proto.h"
#include "rpc/status.h"
#include "rpc/token_logprobs_proto.h"
#include "rpc/worker_status.h"

namespace baton::decode_worker {
namespace {

using baton::v1::DecodeResponse;

// One Decode stream: the engine thread queues tokens (TokenSink), gRPC writes them one at a time.
// Shared by the reactor and the decode batch; the reactor is valid until Finish has been called.
class DecodeStream final : public TokenSink,
                           public grpc::ServerWriteReactor<DecodeResponse> {
 public:
  DecodeStream(DecodeBatch* batch, std::function<void()> wake) : batch_(*batch), wake_(wake) {}

  void Start(std::string id, std::shared_ptr<DecodeStream> self) {
    id_ = std::move(id);
    self_ = std::move(self);
  }

  // Ends the stream before the sequence ran (claim failed).
  void FinishEarly(const grpc::Status& status) {
    {
      absl::MutexLock lock(&mu_);
      done_ = true;
      final_status_ = status;
    }
    Pump();
  }

  void OnToken(int32_t token, const engine::TokenLogprobs* logprobs, int32_t n_generated,
               const SequenceCounts& counts) override {
    {
      absl::MutexLock lock(&mu_);
      if (done_) return;
      DecodeResponse& r = queue_.emplace_back();
      r.add_tokens(token);
      if (logprobs != nullptr) rpc::TokenLogprobsToProto(*logprobs, r.add_logprobs());
      r.set_n_generated(n_generated);
      r.set_spec_draft_tokens(counts.proposed);
      r.set_spec_accepted_tokens(counts.accepted);
      r.set_mask_seconds(counts.mask_seconds);
    }
    Pump();
  }

  void OnEnd(engine::FinishReason finish, int32_t n_generated,
             const SequenceCounts& counts, const absl::Status& error) override {
    {
      absl::MutexLock lock(&mu_);
      if (done_) return;
      done_ = true;
      if (!error.ok()) {
        final_status_ = rpc::ToGrpcStatus(error);
      } else {
        DecodeResponse& last = queue_.emplace_back();
        last.set_finish_reason(rpc::FinishReasonToProto(finish));
        last.set_n_generated(n_generated);
        last.set_spec_draft_tokens(counts.proposed);
        last.set_spec_accepted_tokens(counts.accepted);
        last.set_mask_seconds(counts.mask_seconds);
      }
    }
    Pump();
  }

  void OnWriteDone(bool ok) override {
    {
      absl::MutexLock lock(&mu_);
      queue_.pop_front();
      write_in_flight_ = false;
      if (!ok) {
        // The client is gone: stop decoding; finish once the batch confirms.
        queue_.clear();
      }
    }
    if (!ok) CancelSequence();
    Pump();
  }

  void OnCancel() override { CancelSequence(); }

  void OnDone() override {
    std::shared_ptr<DecodeStream> self;
    absl::MutexLock lock(&mu_);
    self.swap(self_);  // the batch may still hold a reference; it outlives this call
  }

 private:
  void CancelSequence() {
    batch_.Cancel(id_);
    wake_();
  }

  void Pump() {
    const DecodeResponse* to_write = nullptr;
    bool finish = false;
    grpc::Status status;
    {
      absl::MutexLock lock(&mu_);
      if (write_in_flight_ || finish_sent_) return;
      if (!queue_.empty()) {
        write_in_flight_ = true;
        to_write = &queue_.front();
      } else if (done_) {
        finish_sent_ = true;
        finish = true;
        status = final_status_;
      }
    }
    if (to_write != nullptr) StartWrite(to_write);
    if (finish) Finish(status);
  }

  DecodeBatch& batch_;
  std::function<void()> wake_;
  std::string id_;
  absl::Mutex mu_;
  std::shared_ptr<DecodeStream> self_ ABSL_GUARDED_BY(mu_);  // keeps this alive until OnDone
  std::deque<DecodeResponse> queue_ ABSL_GUARDED_BY(mu_);
  bool write_in_flight_ ABSL_GUARDED_BY(mu_) = false;
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  bool finish_sent_ ABSL_GUARDED_BY(mu_) = false;
  grpc::Status final_status_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

DecodeService::DecodeService(ReservationTable* reservations, DecodeBatch* batch,
                             DecodeServiceOptions options,
                             std::function<baton::v1::WorkerLoad()> load,
                             std::function<void()> wake)
    : reservations_(*reservations),
      batch_(*batch),
      options_(std::move(options)),
      load_(std::move(load)),
      wake_(std::move(wake)) {}

grpc::ServerUnaryReactor* DecodeService::Reserve(grpc::CallbackServerContext* context,
                                                 const baton::v1::ReserveRequest* request,
                                                 baton::v1::ReserveResponse* response) {
  if (absl::Status serves = rpc::CheckServes(options_.role(), "decode"); !serves.ok()) {
    return rpc::FinishUnary(context, rpc::ToGrpcStatus(serves));
  }
  const std::chrono::milliseconds lease = request->lease_ms() > 0
                                              ? std::chrono::milliseconds(request->lease_ms())
                                              : options_.default_lease;
  absl::StatusOr<ReserveResult> result =
      reservations_.Reserve(request->request_id(), request->model_fingerprint(),
                            request->n_prompt_tokens(), request->max_tokens(), lease,
                            {request->prompt_tokens().data(),
                             static_cast<size_t>(request->prompt_tokens_size())},
                            request->cache_salt());
  if (!result.ok()) return rpc::FinishUnary(context, rpc::ToGrpcStatus(result.status()));
  response->set_reservation_id(result->reservation_id);
  response->set_n_blocks(result->n_blocks);
  response->set_n_cached_tokens(result->n_cached_tokens);
  *response->mutable_model() = options_.model;
  return rpc::FinishUnary(context, grpc::Status::OK);
}

grpc::ServerWriteReactor<DecodeResponse>* DecodeService::Decode(
    grpc::CallbackServerContext* context, const baton::v1::DecodeRequest* request) {
  auto stream = std::make_shared<DecodeStream>(&batch_, wake_);
  stream->Start(request->reservation_id(), stream);
  absl::StatusOr<engine::SamplingParams> params =
      rpc::SamplingParamsFromProto(request->sampling(), options_.n_vocab);
  absl::Status valid = params.status();
  if (valid.ok() && request->prompt_tokens_size() == 0) {
    valid = absl::InvalidArgumentError("decode: prompt_tokens is empty");
  }
  for (int32_t id : request->prompt_tokens()) {
    if (valid.ok() && (id < 0 || id >= options_.n_vocab)) {
      valid = absl::InvalidArgumentError(absl::StrCat("decode: prompt token id ", id,
                                                      " outside [0, ", options_.n_vocab, ")"));
    }
  }
  if (valid.ok() && (request->first_token() < 0 || request->first_token() >= options_.n_vocab)) {
    valid = absl::InvalidArgumentError(
        absl::StrCat("decode: first_token ", request->first_token(), " outside the vocabulary"));
  }
  absl::StatusOr<std::unique_ptr<grammar::OutputMatcher>> matcher =
      std::unique_ptr<grammar::OutputMatcher>();
  if (valid.ok()) {
    const int32_t first_token = request->first_token();
    matcher = grammar::StartOutputMatcher(
        options_.grammars, params->constraint,
        {request->prompt_tokens().data(), static_cast<size_t>(request->prompt_tokens_size())},
        {&first_token, 1});
    valid = matcher.status();
  }
  if (!valid.ok()) {
    reservations_.Release(request->reservation_id());
    stream->FinishEarly(rpc::ToGrpcStatus(valid));
    return stream.get();
  }
  absl::StatusOr<ClaimedSequence> claimed =
      reservations_.Claim(request->reservation_id(), request->prompt_tokens_size(),
                          {request->prompt_tokens().data(),
                           static_cast<size_t>(request->prompt_tokens_size())});
  if (!claimed.ok()) {
    stream->FinishEarly(rpc::ToGrpcStatus(claimed.status()));
    return stream.get();
  }
  DecodeSequence seq;
  seq.id = request->reservation_id();
  seq.table = std::move(claimed->table);
  seq.cache_salt = std::move(claimed->cache_salt);
  seq.tokens.assign(request->prompt_tokens().begin(), request->prompt_tokens().end());
  seq.n_prompt = static_cast<int32_t>(seq.tokens.size());
  seq.tokens.push_back(request->first_token());
  seq.params = *params;
  seq.params.max_tokens = std::min(seq.params.max_tokens, claimed->max_tokens);
  seq.output_matcher = *std::move(matcher);
  seq.sink = stream;
  batch_.Admit(std::move(seq));
  wake_();
  return stream.get();
}

grpc::ServerUnaryReactor* DecodeService::Release(grpc::CallbackServerContext* context,
                                                 const baton::v1::ReleaseRequest* request,
                                                 baton::v1::ReleaseResponse* response) {
  bool found = reservations_.Release(request->reservation_id());
  if (!found) {
    found = batch_.Cancel(request->reservation_id());
    wake_();
  }
  response->set_found(found);
  return rpc::FinishUnary(context, grpc::Status::OK);
}

grpc::ServerUnaryReactor* DecodeService::Status(grpc::CallbackServerContext* context,
                                                const baton::v1::StatusRequest* request,
                                                baton::v1::StatusResponse* response) {
  return rpc::AnswerWorkerStatus(context, options_.role(), options_.model, load_, response);
}

}  // namespace baton::decode_worker
