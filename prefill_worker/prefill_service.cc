#include "prefill_worker/prefill_service.h"

#include <memory>

#include "absl/strings/str_cat.h"
#include "engine/block_hash.h"
#include "engine/prefix_cache.h"
#include "rpc/prefill_stage.h"
#include "rpc/sampling_params_proto.h"
#include "rpc/status.h"
#include "rpc/token_logprobs_proto.h"
#include "rpc/worker_status.h"

namespace baton::prefill_worker {
namespace {

// A Prefill call in flight: cancels its job when the caller goes away, and tells the caller when
// the forward pass is done.
class PrefillCall final : public grpc::ServerUnaryReactor {
 public:
  PrefillCall(grpc::CallbackServerContext* context, std::shared_ptr<PrefillJob> job)
      : context_(context), job_(std::move(job)) {}
  void OnCancel() override { job_->cancelled = true; }
  void OnDone() override { delete this; }

  // The initial metadata that tells the caller the forward pass is done (worker.proto). Called
  // once, before Finish.
  void SendKvSending() {
    context_->AddInitialMetadata(std::string(rpc::kPrefillStageKey),
                                std::string(rpc::kPrefillStageKvSending));
    StartSendInitialMetadata();
  }

  // Ends the call with `status` (not OK), saying whose fault it was (rpc/prefill_stage.h).
  void Fail(const absl::Status& status) {
    if (rpc::IsKvDestinationFault(status)) {
      context_->AddTrailingMetadata(std::string(rpc::kPrefillFaultKey),
                                    std::string(rpc::kPrefillFaultKvDestination));
    }
    Finish(rpc::ToGrpcStatus(status));
  }

 private:
  grpc::CallbackServerContext* const context_;
  std::shared_ptr<PrefillJob> job_;
};

}  // namespace

PrefillService::PrefillService(PrefillScheduler* scheduler, PrefillServiceOptions options,
                               std::function<baton::v1::WorkerLoad()> load,
                               std::function<void()> wake)
    : scheduler_(*scheduler),
      options_(std::move(options)),
      load_(std::move(load)),
      wake_(std::move(wake)) {}

absl::Status PrefillService::Validate(const baton::v1::PrefillRequest& request) const {
  if (request.model_fingerprint() != options_.model.fingerprint()) {
    return absl::InvalidArgumentError(absl::StrCat("prefill: model fingerprint '",
                                                   request.model_fingerprint(),
                                                   "' does not match this worker's '",
                                                   options_.model.fingerprint(), "'"));
  }
  if (request.prompt_tokens_size() == 0) {
    return absl::InvalidArgumentError("prefill: prompt_tokens is empty");
  }
  if (request.prompt_tokens_size() > options_.max_prompt_tokens) {
    return absl::InvalidArgumentError(absl::StrCat("prefill: prompt of ",
                                                   request.prompt_tokens_size(),
                                                   " tokens exceeds this worker's limit of ",
                                                   options_.max_prompt_tokens));
  }
  for (int i = 0; i < request.prompt_tokens_size(); ++i) {
    const int32_t id = request.prompt_tokens(i);
    if (id < 0 || id >= options_.n_vocab) {
      return absl::InvalidArgumentError(absl::StrCat("prefill: prompt_tokens[", i, "] = ", id,
                                                     " outside [0, ", options_.n_vocab, ")"));
    }
  }
  if (request.destination().decode_address().empty() ||
      request.destination().reservation_id().empty()) {
    return absl::InvalidArgumentError(
        "prefill: destination needs a decode_address and a reservation_id");
  }
  if (request.cache_salt().size() > engine::kMaxCacheSaltBytes) {
    return absl::InvalidArgumentError(absl::StrCat("prefill: cache_salt of ",
                                                   request.cache_salt().size(), " bytes exceeds ",
                                                   engine::kMaxCacheSaltBytes));
  }
  const int32_t block_size = options_.model.block_size();
  const int32_t max_cached_blocks =
      block_size > 0 ? engine::MaxCachedTokens(request.prompt_tokens_size(), block_size) / block_size
                     : 0;
  if (request.destination().n_cached_blocks() < 0 ||
      request.destination().n_cached_blocks() > max_cached_blocks) {
    return absl::InvalidArgumentError(absl::StrCat(
        "prefill: destination n_cached_blocks ", request.destination().n_cached_blocks(),
        " outside [0, ", max_cached_blocks, "] for a prompt of ", request.prompt_tokens_size(),
        " tokens"));
  }
  return absl::OkStatus();
}

grpc::ServerUnaryReactor* PrefillService::Prefill(grpc::CallbackServerContext* context,
                                                  const baton::v1::PrefillRequest* request,
                                                  baton::v1::PrefillResponse* response) {
  if (absl::Status serves = rpc::CheckServes(options_.role(), "prefill"); !serves.ok()) {
    return rpc::FinishUnary(context, rpc::ToGrpcStatus(serves));
  }
  if (absl::Status valid = Validate(*request); !valid.ok()) {
    return rpc::FinishUnary(context, rpc::ToGrpcStatus(valid));
  }
  absl::StatusOr<engine::SamplingParams> params =
      rpc::SamplingParamsFromProto(request->sampling(), options_.n_vocab);
  if (!params.ok()) return rpc::FinishUnary(context, rpc::ToGrpcStatus(params.status()));

  auto job = std::make_shared<PrefillJob>();
  job->request_id = request->request_id();
  job->prompt.assign(request->prompt_tokens().begin(), request->prompt_tokens().end());
  job->params = *params;
  absl::StatusOr<std::unique_ptr<grammar::OutputMatcher>> matcher =
      grammar::StartOutputMatcher(options_.grammars, job->params.constraint, job->prompt, {});
  if (!matcher.ok()) return rpc::FinishUnary(context, rpc::ToGrpcStatus(matcher.status()));
  job->output_matcher = *std::move(matcher);
  job->destination = request->destination().decode_address();
  job->reservation_id = request->destination().reservation_id();
  job->destination_cached_blocks = request->destination().n_cached_blocks();
  job->cache_salt = request->cache_salt();
  const auto now = std::chrono::system_clock::now();
  // The caller's deadline (the router's --prefill-timeout); default_deadline when it set none.
  const auto no_deadline = std::chrono::system_clock::time_point::max() - std::chrono::hours(24);
  job->deadline = context->deadline() < no_deadline ? context->deadline()
                                                    : now + options_.default_deadline;
  auto* call = new PrefillCall(context, job);
  job->forward_done = [call] { call->SendKvSending(); };
  job->done = [call, response, n_prompt = request->prompt_tokens_size()](
                  absl::StatusOr<PrefillResult> result) {
    if (!result.ok()) {
      call->Fail(result.status());
      return;
    }
    response->set_first_token(result->first_token);
    if (result->first_token_logprobs.has_value()) {
      rpc::TokenLogprobsToProto(*result->first_token_logprobs,
                                response->mutable_first_token_logprobs());
    }
    for (const engine::TokenLogprobs& logprobs : result->prompt_logprobs) {
      rpc::TokenLogprobsToProto(logprobs, response->add_prompt_logprobs());
    }
    response->set_kv_bytes_sent(result->kv_bytes);
    response->set_prefill_seconds(result->prefill_seconds);
    response->set_kv_transfer_seconds(result->kv_transfer_seconds);
    response->set_n_prompt_tokens(n_prompt);
    response->set_n_cached_tokens(result->cached_tokens);
    response->set_kv_transport(result->kv_transport);
    call->Finish(grpc::Status::OK);
  };
  scheduler_.Enqueue(job);
  wake_();
  return call;
}

grpc::ServerUnaryReactor* PrefillService::CancelPrefill(grpc::CallbackServerContext* context,
                                                        const baton::v1::CancelRequest* request,
                                                        baton::v1::CancelResponse* response) {
  response->set_found(scheduler_.Cancel(request->request_id()));
  return rpc::FinishUnary(context, grpc::Status::OK);
}

grpc::ServerUnaryReactor* PrefillService::Status(grpc::CallbackServerContext* context,
                                                 const baton::v1::StatusRequest* request,
                                                 baton::v1::StatusResponse* response) {
  return rpc::AnswerWorkerStatus(context, options_.role(), options_.model, load_, response);
}

}  // namespace baton::prefill_worker
