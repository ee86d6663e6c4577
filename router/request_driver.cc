#include "router/request_driver.h"

#include <algorithm>
#include <atomic>
#include <functional>
#include <utility>

#include "absl/random/random.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/notification.h"
#include "base/log.h"
#include "baton/v1/worker.grpc.pb.h"
#include "router/decode_stream.h"
#include "router/request_metrics.h"
#include "rpc/finish_reason_proto.h"
#include "rpc/prefill_stage.h"
#include "rpc/server_options.h"
#include "rpc/status.h"

namespace baton::router {
namespace {

// One Prefill call, waited for on the request thread. When the worker says its forward pass is
// done (rpc/prefill_stage.h), records the time and runs `on_kv_sending` (on a gRPC thread,
// before the call ends).
class PrefillCallWaiter final : public grpc::ClientUnaryReactor {
 public:
  PrefillCallWaiter(grpc::ClientContext* context, std::function<void()> on_kv_sending)
      : context_(context), on_kv_sending_(std::move(on_kv_sending)) {}

  void OnReadInitialMetadataDone(bool ok) override {
    if (!ok) return;
    const auto& metadata = context_->GetServerInitialMetadata();
    const auto it = metadata.find(grpc::string_ref(rpc::kPrefillStageKey.data(),
                                                   rpc::kPrefillStageKey.size()));
    if (it == metadata.end() ||
        it->second != grpc::string_ref(rpc::kPrefillStageKvSending.data(),
                                       rpc::kPrefillStageKvSending.size())) {
      return;
    }
    {
      absl::MutexLock lock(&mu_);
      kv_sending_at_ = absl::Now();
    }
    on_kv_sending_();
  }

  void OnDone(const grpc::Status& status) override {
    absl::MutexLock lock(&mu_);
    status_ = status;
    done_ = true;
  }

  // Blocks until the call has ended; its status.
  grpc::Status Wait() {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(&done_));
    return status_;
  }

  // When the worker said its forward pass was done; InfinitePast when it did not.
  absl::Time kv_sending_at() {
    absl::MutexLock lock(&mu_);
    return kv_sending_at_;
  }

 private:
  grpc::ClientContext* const context_;
  const std::function<void()> on_kv_sending_;
  absl::Mutex mu_;
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  grpc::Status status_ ABSL_GUARDED_BY(mu_);
  absl::Time kv_sending_at_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
};

// Tells the registry once that a prompt placed on a prefill worker no longer waits there: at the
// first of its forward pass ending (its KV starts to flow) and its call ending, however it ends.
class PrefillInFlight {
 public:
  PrefillInFlight(WorkerRegistry* registry, const Placement& placement)
      : registry_(registry), placement_(placement) {}
  ~PrefillInFlight() { End(); }
  void End() {
    if (!ended_.exchange(true)) registry_->PrefillEnded(placement_);
  }

 private:
  WorkerRegistry* const registry_;
  const Placement placement_;
  std::atomic<bool> ended_{false};
};

uint64_t RandomSeed() {
  thread_local absl::BitGen gen;
  return absl::Uniform<uint64_t>(gen);
}

// A failed worker call as the client sees it: the worker's role and address, and what happened.
absl::Status WorkerError(absl::string_view kind, absl::string_view address, absl::string_view rpc,
                         const grpc::Status& status) {
  const std::string& message = status.error_message();
  switch (status.error_code()) {
    case grpc::StatusCode::UNAVAILABLE:
      return absl::UnavailableError(absl::StrCat(kind, " ", address, " unavailable: ", message));
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      return absl::DeadlineExceededError(absl::StrCat(kind, " ", address, " did not finish ", rpc,
                                                      " before the deadline: ", message));
    default:
      return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                          absl::StrCat(kind, " ", address, ": ", rpc, " failed: ", message));
  }
}

double Seconds(absl::Duration d) { return absl::ToDoubleSeconds(d); }

// A token id a worker returned, checked before anything renders it; `what` names it.
absl::Status CheckToken(int32_t token, int32_t n_vocab, absl::string_view what) {
  if (token >= 0 && token < n_vocab) return absl::OkStatus();
  return absl::InternalError(
      absl::StrCat("returned ", what, " ", token, " outside the vocabulary"));
}

// A worker's log-probabilities of one token, checked before anything renders their token ids:
// the `k` most likely tokens (fewer only in a smaller vocabulary), each in the vocabulary.
absl::Status CheckLogprobs(const v1::TokenLogprobs& logprobs, int32_t k, int32_t n_vocab) {
  const int expected = std::min(k, n_vocab);
  if (logprobs.top_tokens_size() != expected || logprobs.top_logprobs_size() != expected) {
    return absl::InternalError(absl::StrCat(
        "returned ", logprobs.top_tokens_size(), " top tokens and ", logprobs.top_logprobs_size(),
        " top log-probabilities for a request that asked for ", expected));
  }
  for (int32_t id : logprobs.top_tokens()) {
    if (absl::Status s = CheckToken(id, n_vocab, "top token"); !s.ok()) return s;
  }
  return absl::OkStatus();
}

}  // namespace

// A Release call in flight. Owned by the call's callback and by the attempt that started it.
struct RequestDriver::ReleaseCall {
  std::unique_ptr<v1::DecodeWorker::Stub> stub;
  grpc::ClientContext context;
  v1::ReleaseRequest request;
  v1::ReleaseResponse response;
  absl::Notification answered;  // or failed, or timed out
};

RequestDriver::RequestDriver(const RequestDriverDeps& deps, v1::GenerateRequest request,
                             std::string request_id, absl::Time received, absl::Time deadline,
                             ResponseSink* sink)
    : deps_(deps),
      request_(std::move(request)),
      request_id_(std::move(request_id)),
      received_(received),
      deadline_(deadline),
      sink_(sink) {}

void RequestDriver::Run() {
  const absl::Status status = Drive();
  const absl::Time ended = absl::Now();
  RecordRequestEnd(status, finish_reason_, ended - received_, ended - first_token_at_,
                   static_cast<int64_t>(prepared_.prompt.size()), n_generated_,
                   attempt_.prefill_response.n_cached_tokens());
  LogRequestEnd(status, ended);
  EndAttempt(status);
  if (attempt_.release != nullptr) attempt_.release->answered.WaitForNotification();
  SetState(status.ok() ? v1::REQUEST_STATE_FINISHED : v1::REQUEST_STATE_FAILED).IgnoreError();
  sink_->Close(status);
}

void RequestDriver::LogRequestEnd(const absl::Status& status, absl::Time ended) const {
  const bool got_first_token = first_token_at_ != absl::Time();
  BATON_LOG(INFO) << "request " << request_id_ << " " << RequestOutcome(status, finish_reason_)
                  << ": prompt " << prepared_.prompt.size() << " tokens, generated "
                  << n_generated_ << ", ttft "
                  << (got_first_token ? absl::StrFormat("%.1f ms", absl::ToDoubleMilliseconds(
                                                                     first_token_at_ - received_))
                                      : std::string("-"))
                  << ", e2e "
                  << absl::StrFormat("%.1f ms", absl::ToDoubleMilliseconds(ended - received_))
                  << ", prefill " << (attempt_.prefill.address.empty() ? "-" : attempt_.prefill.address)
                  << ", decode " << (attempt_.decode.address.empty() ? "-" : attempt_.decode.address)
                  << (migrations_ > 0 ? absl::StrCat(", migrations ", migrations_) : "")
                  << (status.ok() ? "" : absl::StrCat(": ", status.ToString()));
}

void RequestDriver::Cancel() {
  cancelled_.store(true);
  {
    absl::MutexLock lock(&mu_);
    if (active_call_ != nullptr) active_call_->TryCancel();
  }
  // A request waiting in the queue waits on the registry: wake it so that it sees the flag.
  deps_.registry->Wake();
}

absl::Status RequestDriver::Drive() {
  if (cancelled_.load()) return CancelledStatus();
  absl::StatusOr<PreparedRequest> prepared = PrepareRequest(request_, *deps_.model, RandomSeed());
  if (!prepared.ok()) return prepared.status();
  prepared_ = std::move(*prepared);
  engine::GenerationState generation(deps_.model->tokenizer(), prepared_.params, prepared_.prompt,
                                     deps_.model->n_ctx());
  absl::Status moved_after;  // the worker failure that made the request migrate last
  while (true) {
    BeginAttempt(generation);
    const absl::Status status = RunAttempt(generation);
    if (status.ok() || !ShouldMigrate(status)) {
      if (status.ok() || moved_after.ok() || !attempt_.failed_worker_id.empty() ||
          cancelled_.load()) {
        return status;
      }
      // The new pair never came to be: the worker's failure is what the client must hear.
      return absl::Status(moved_after.code(),
                          absl::StrCat(moved_after.message(), "; no other worker pair took the "
                                       "request over: ", status.message()));
    }
    moved_after = status;
    ++migrations_;
    RequestMetrics::Get().migrations_total.Increment();
    BATON_LOG(WARNING) << "request " << request_id_ << " moves to another worker pair after "
                       << generation.n_generated() << " generated tokens (migration "
                       << migrations_ << "): " << status.ToString();
    EndAttempt(status);
    deps_.table->Restart(request_id_);
  }
}

void RequestDriver::BeginAttempt(const engine::GenerationState& generation) {
  attempt_ = Attempt{};
  attempt_.prompt = generation.tokens();
  attempt_.prompt_hashes.emplace(deps_.model->fingerprint(), prepared_.cache_salt,
                                 attempt_.prompt);
  attempt_.wire = prepared_.wire;
  attempt_.wire.set_max_tokens(prepared_.params.max_tokens - generation.n_generated());
  // The client has the prompt's log-probabilities once a token went out; a migrated request's
  // prompt (with the tokens generated) needs none.
  if (generation.n_generated() > 0) attempt_.wire.clear_prompt_logprobs();
  // The tokens generated so far are the new prompt's tail: the output constraint holds from them.
  if (attempt_.wire.has_constraint()) {
    attempt_.wire.mutable_constraint()->set_n_output_in_prompt(generation.n_generated());
  }
}

absl::Status RequestDriver::RunAttempt(engine::GenerationState& generation) {
  if (absl::Status s = Reserve(); !s.ok()) return s;
  if (migrations_ == 0) {
    reserved_at_ = absl::Now();
    RequestMetrics::Get().queue_time.Observe(Seconds(reserved_at_ - received_));
  }
  if (absl::Status s = Prefill(); !s.ok()) return s;
  RequestMetrics::Get().kv_transfer_seconds.Observe(
      attempt_.prefill_response.kv_transfer_seconds());
  RequestMetrics::Get().kv_transfer_bytes.Observe(
      static_cast<double>(attempt_.prefill_response.kv_bytes_sent()));
  if (absl::Status s = AcceptPrefillToken(generation); !s.ok() || generation.finished()) return s;
  return Decode(generation);
}

absl::Status RequestDriver::AcceptPrefillToken(engine::GenerationState& generation) {
  const int32_t token = attempt_.prefill_response.first_token();
  const bool want_logprobs = prepared_.params.logprobs >= 0;
  absl::Status checked = CheckToken(token, deps_.model->n_vocab(), "token");
  if (checked.ok() && want_logprobs) {
    checked = attempt_.prefill_response.has_first_token_logprobs()
                  ? CheckLogprobs(attempt_.prefill_response.first_token_logprobs(),
                                  prepared_.params.logprobs, deps_.model->n_vocab())
                  : absl::InternalError("returned no log-probabilities for the first token");
  }
  if (checked.ok()) checked = CheckPromptLogprobs();
  if (!checked.ok()) {
    return WorkerFailed(attempt_.prefill, "prefill worker", "Prefill", rpc::ToGrpcStatus(checked));
  }
  v1::GenerateResponse out;
  if (want_logprobs) *out.add_logprobs() = attempt_.prefill_response.first_token_logprobs();
  out.mutable_prompt_logprobs()->Swap(attempt_.prefill_response.mutable_prompt_logprobs());
  out.set_request_id(request_id_);
  out.set_text(generation.Accept(token));
  n_generated_ = generation.n_generated();
  out.add_tokens(token);
  if (first_token_at_ == absl::Time()) {
    first_token_at_ = absl::Now();
    RequestMetrics::Get().ttft.Observe(Seconds(first_token_at_ - received_));
  }
  // Done with this token: Decode never starts, so the reservation is released (EndAttempt).
  if (generation.finished()) {
    Finalize(generation, rpc::FinishReasonToProto(generation.finish_reason()), out);
  }
  return sink_->Send(std::move(out)) ? absl::OkStatus() : CancelledStatus();
}

absl::Status RequestDriver::CheckPromptLogprobs() const {
  const v1::PrefillResponse& response = attempt_.prefill_response;
  if (!attempt_.wire.has_prompt_logprobs()) {
    if (response.prompt_logprobs_size() == 0) return absl::OkStatus();
    return absl::InternalError("returned prompt log-probabilities nobody asked for");
  }
  const int expected = static_cast<int>(attempt_.prompt.size()) - 1;
  if (response.prompt_logprobs_size() != expected) {
    return absl::InternalError(absl::StrCat("returned ", response.prompt_logprobs_size(),
                                            " prompt log-probabilities for a prompt of ",
                                            attempt_.prompt.size(), " tokens"));
  }
  for (const v1::TokenLogprobs& logprobs : response.prompt_logprobs()) {
    if (absl::Status s = CheckLogprobs(logprobs, attempt_.wire.prompt_logprobs(),
                                       deps_.model->n_vocab());
        !s.ok()) {
      return s;
    }
  }
  return absl::OkStatus();
}

void RequestDriver::EndAttempt(const absl::Status& status) {
  // The prefill first (it may still push KV), then the blocks.
  if (attempt_.prefill_started && !attempt_.prefill_done &&
      (cancelled_.load() || absl::IsDeadlineExceeded(status))) {
    CancelPrefillCall();
  }
  ReleaseReservation();
}

bool RequestDriver::ShouldMigrate(const absl::Status& status) const {
  if (attempt_.failed_worker_id.empty() || cancelled_.load()) return false;
  if (migrations_ >= deps_.options.max_migrations || absl::Now() >= deadline_) return false;
  switch (status.code()) {
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kDeadlineExceeded:
    case absl::StatusCode::kAborted:
    case absl::StatusCode::kInternal:
    case absl::StatusCode::kUnknown:
    case absl::StatusCode::kDataLoss:
      return true;
    default:  // the request's own fault (invalid, too large), or the client's
      return false;
  }
}

absl::Status RequestDriver::WorkerFailed(const Placement& worker, absl::string_view kind,
                                         absl::string_view rpc, const grpc::Status& status) {
  attempt_.failed_worker_id = worker.worker_id;
  failed_workers_.insert(worker.worker_id);
  if (status.error_code() == grpc::StatusCode::UNAVAILABLE) {
    deps_.registry->MarkUnavailable(worker.worker_id);
  }
  return WorkerError(kind, worker.address, rpc, status);
}

absl::Status RequestDriver::Reserve() {
  const RequestDriverOptions& options = deps_.options;
  int failures = 0;
  bool queued = false;
  absl::Time no_worker_since = absl::InfiniteFuture();  // since when no decode worker is healthy
  while (true) {
    if (cancelled_.load()) return CancelledStatus();
    const uint64_t epoch = deps_.registry->epoch();
    NoPlacement why = NoPlacement::kNoWorker;
    absl::StatusOr<Placement> placement =
        deps_.registry->PickDecode(static_cast<int64_t>(attempt_.prompt.size()),
                                   attempt_.wire.max_tokens(), &why, failed_workers_,
                                   &*attempt_.prompt_hashes);
    if (placement.ok()) {
      absl::StatusOr<std::shared_ptr<grpc::Channel>> channel =
          deps_.channels->Get(placement->address);
      if (!channel.ok()) return channel.status();
      std::unique_ptr<v1::DecodeWorker::Stub> stub = v1::DecodeWorker::NewStub(*channel);
      grpc::ClientContext context;
      rpc::PrepareContext(context, deps_.channels->options(),
                          absl::ToChronoTime(CallDeadline(options.reserve_timeout)));
      v1::ReserveRequest request;
      request.set_request_id(request_id_);
      request.set_n_prompt_tokens(static_cast<int32_t>(attempt_.prompt.size()));
      request.mutable_prompt_tokens()->Assign(attempt_.prompt.begin(), attempt_.prompt.end());
      request.set_cache_salt(prepared_.cache_salt);
      request.set_max_tokens(attempt_.wire.max_tokens());
      request.set_lease_ms(absl::ToInt64Milliseconds(options.reservation_lease));
      request.set_model_fingerprint(deps_.model->fingerprint());
      v1::ReserveResponse response;
      if (!BeginCall(&context)) return CancelledStatus();
      const grpc::Status status = stub->Reserve(&context, request, &response);
      EndCall();
      if (status.ok()) {
        attempt_.decode = *std::move(placement);
        attempt_.reservation = std::move(response);
        attempt_.holds_reservation = true;
        if (attempt_.reservation.reservation_id().empty()) {
          return absl::InternalError(absl::StrCat("decode worker ", attempt_.decode.address,
                                                  " answered Reserve without a reservation id"));
        }
        return absl::OkStatus();
      }
      // The reservation may exist if only the answer was lost; its lease frees it.
      if (cancelled_.load()) return CancelledStatus();
      switch (status.error_code()) {
        case grpc::StatusCode::RESOURCE_EXHAUSTED:
          // Our view of its blocks was stale: try the others, else wait for the next report.
          deps_.registry->MarkFull(placement->worker_id);
          continue;
        case grpc::StatusCode::UNAVAILABLE:
        case grpc::StatusCode::DEADLINE_EXCEEDED:
        case grpc::StatusCode::ABORTED:  // it left the decode role since its last report
          if (absl::Now() >= deadline_ || ++failures >= options.max_reserve_failures) {
            return WorkerError("decode worker", placement->address, "Reserve", status);
          }
          deps_.registry->MarkUnavailable(placement->worker_id);
          continue;
        default:
          return WorkerError("decode worker", placement->address, "Reserve", status);
      }
    }
    if (why == NoPlacement::kTooLarge) return placement.status();
    // No room anywhere now: wait in the router's queue for a change (or the next poll).
    if (!queued) {
      if (absl::Status s = SetState(v1::REQUEST_STATE_QUEUED); !s.ok()) {
        return absl::Status(s.code(), absl::StrCat(s.message(), ": ", placement.status().message()));
      }
      queued = true;
    }
    const absl::Time now = absl::Now();
    if (now >= deadline_) {
      return absl::DeadlineExceededError(absl::StrFormat(
          "the request's deadline passed after %.3f s waiting in the router queue (%s)",
          Seconds(now - received_), placement.status().message()));
    }
    if (why != NoPlacement::kNoWorker) {
      no_worker_since = absl::InfiniteFuture();
    } else if (no_worker_since == absl::InfiniteFuture()) {
      no_worker_since = now;
    } else if (now - no_worker_since >= options.no_worker_wait) {
      return absl::UnavailableError(absl::StrFormat("%s (none for %.1f s)",
                                                    placement.status().message(),
                                                    Seconds(now - no_worker_since)));
    }
    deps_.registry->WaitForChange(epoch, std::min(deadline_, now + options.queue_poll_interval),
                                  &cancelled_);
  }
}

absl::StatusOr<Placement> RequestDriver::AwaitPrefillWorker() {
  const absl::Time since = absl::Now();
  const absl::Time give_up = std::min(deadline_, since + deps_.options.no_worker_wait);
  while (true) {
    if (cancelled_.load()) return CancelledStatus();
    const uint64_t epoch = deps_.registry->epoch();
    absl::StatusOr<Placement> placement = deps_.registry->PickPrefill(
        static_cast<int64_t>(attempt_.prompt.size()), attempt_.decode.worker_id, failed_workers_,
        &*attempt_.prompt_hashes);
    const absl::Time now = absl::Now();
    if (placement.ok()) return placement;
    if (now >= give_up) {
      return absl::Status(placement.status().code(),
                          absl::StrFormat("%s (none for %.1f s)", placement.status().message(),
                                          Seconds(now - since)));
    }
    deps_.registry->WaitForChange(epoch, std::min(give_up, now + deps_.options.queue_poll_interval),
                                  &cancelled_);
  }
}

absl::Status RequestDriver::Prefill() {
  if (absl::Status s = SetState(v1::REQUEST_STATE_PREFILLING); !s.ok()) return s;
  absl::StatusOr<Placement> placement = AwaitPrefillWorker();
  if (!placement.ok()) return placement.status();
  attempt_.prefill = *std::move(placement);
  PrefillInFlight in_flight(deps_.registry, attempt_.prefill);
  absl::StatusOr<std::shared_ptr<grpc::Channel>> channel =
      deps_.channels->Get(attempt_.prefill.address);
  if (!channel.ok()) return channel.status();
  std::unique_ptr<v1::PrefillWorker::Stub> stub = v1::PrefillWorker::NewStub(*channel);
  grpc::ClientContext context;
  rpc::PrepareContext(context, deps_.channels->options(),
                      absl::ToChronoTime(CallDeadline(deps_.options.prefill_timeout)));
  v1::PrefillRequest request;
  request.set_request_id(request_id_);
  request.mutable_prompt_tokens()->Assign(attempt_.prompt.begin(), attempt_.prompt.end());
  *request.mutable_sampling() = attempt_.wire;
  v1::KvDestination& destination = *request.mutable_destination();
  destination.set_decode_address(attempt_.decode.address);
  destination.set_reservation_id(attempt_.reservation.reservation_id());
  destination.set_n_blocks(attempt_.reservation.n_blocks());
  const int32_t block_size = attempt_.reservation.model().block_size();
  destination.set_n_cached_blocks(
      block_size > 0 ? attempt_.reservation.n_cached_tokens() / block_size : 0);
  request.set_model_fingerprint(deps_.model->fingerprint());
  request.set_cache_salt(prepared_.cache_salt);
  if (!BeginCall(&context)) return CancelledStatus();
  attempt_.prefill_started = true;
  PrefillCallWaiter call(&context, [this, &in_flight] {
    in_flight.End();
    SetState(v1::REQUEST_STATE_KV_SENDING).IgnoreError();
  });
  stub->async()->Prefill(&context, &request, &attempt_.prefill_response, &call);
  call.StartCall();
  const grpc::Status status = call.Wait();
  EndCall();
  if (status.ok()) {
    attempt_.prefill_done = true;
    attempt_.kv_sending_at = call.kv_sending_at();
    attempt_.kv_received_at = absl::Now();
    // Prefill answers once every layer's KV is acknowledged by the decode worker.
    return SetState(v1::REQUEST_STATE_KV_RECEIVED);
  }
  if (cancelled_.load()) return CancelledStatus();
  const auto& trailers = context.GetServerTrailingMetadata();
  const auto fault = trailers.find(
      grpc::string_ref(rpc::kPrefillFaultKey.data(), rpc::kPrefillFaultKey.size()));
  if (fault != trailers.end() &&
      fault->second == grpc::string_ref(rpc::kPrefillFaultKvDestination.data(),
                                        rpc::kPrefillFaultKvDestination.size())) {
    return WorkerFailed(attempt_.decode, "decode worker", "the KV hand-off", status);
  }
  return WorkerFailed(attempt_.prefill, "prefill worker", "Prefill", status);
}

absl::Status RequestDriver::Decode(engine::GenerationState& generation) {
  if (absl::Status s = SetState(v1::REQUEST_STATE_DECODING); !s.ok()) return s;
  absl::StatusOr<std::shared_ptr<grpc::Channel>> channel =
      deps_.channels->Get(attempt_.decode.address);
  if (!channel.ok()) return channel.status();
  std::unique_ptr<v1::DecodeWorker::Stub> stub = v1::DecodeWorker::NewStub(*channel);
  grpc::ClientContext context;
  rpc::PrepareContext(context, deps_.channels->options(), absl::ToChronoTime(deadline_));
  v1::DecodeRequest request;
  request.set_reservation_id(attempt_.reservation.reservation_id());
  request.mutable_prompt_tokens()->Assign(attempt_.prompt.begin(), attempt_.prompt.end());
  request.set_first_token(attempt_.prefill_response.first_token());
  *request.mutable_sampling() = attempt_.wire;
  if (!BeginCall(&context)) return CancelledStatus();
  DecodeStream stream(&context, *stub, request);

  const int32_t n_vocab = deps_.model->n_vocab();
  v1::DecodeResponse message;
  v1::GenerateResponse last;    // the final message, sent once the stream is closed
  bool have_last = false;
  bool worker_finished = false;  // the worker ended the sequence (and freed its blocks) itself
  bool client_gone = false;
  bool stalled = false;
  absl::Status bad_reply;  // a token or log-probabilities no worker may send
  const bool want_logprobs = prepared_.params.logprobs >= 0;
  absl::Time last_token_at = absl::Now();
  absl::Time last_message_at = last_token_at;
  while (true) {
    const DecodeStream::Read read =
        stream.Next(&message, last_message_at + deps_.options.stall_timeout);
    if (read == DecodeStream::Read::kEnd) break;
    if (read == DecodeStream::Read::kStalled) {
      stalled = true;
      context.TryCancel();
      break;
    }
    last_message_at = absl::Now();
    if (have_last) continue;  // drain to the end of the stream
    if (message.tokens_size() > 0) {
      const double gap = Seconds(last_message_at - last_token_at) / message.tokens_size();
      for (int i = 0; i < message.tokens_size(); ++i) RequestMetrics::Get().itl.Observe(gap);
      last_token_at = last_message_at;
    }
    v1::GenerateResponse out;
    out.set_request_id(request_id_);
    std::string text;
    if (want_logprobs && message.logprobs_size() != message.tokens_size()) {
      bad_reply = absl::InternalError(absl::StrCat("returned ", message.logprobs_size(),
                                                   " log-probabilities for ",
                                                   message.tokens_size(), " tokens"));
    }
    for (int i = 0; i < message.tokens_size() && bad_reply.ok(); ++i) {
      const int32_t token = message.tokens(i);
      if (generation.finished()) break;
      bad_reply = CheckToken(token, n_vocab, "token");
      if (bad_reply.ok() && want_logprobs) {
        bad_reply = CheckLogprobs(message.logprobs(i), prepared_.params.logprobs, n_vocab);
      }
      if (!bad_reply.ok()) break;
      if (want_logprobs) *out.add_logprobs() = message.logprobs(i);
      text += generation.Accept(token);
      n_generated_ = generation.n_generated();
      out.add_tokens(token);
    }
    if (!bad_reply.ok()) {
      context.TryCancel();
      break;
    }
    out.set_text(std::move(text));
    attempt_.spec_draft_tokens = message.spec_draft_tokens();
    attempt_.spec_accepted_tokens = message.spec_accepted_tokens();
    attempt_.mask_seconds = message.mask_seconds();
    if (message.finish_reason() != v1::FINISH_REASON_UNSPECIFIED) worker_finished = true;
    if (generation.finished() || worker_finished) {
      Finalize(generation,
               generation.finished() ? rpc::FinishReasonToProto(generation.finish_reason())
                                     : message.finish_reason(),
               out);
      last = std::move(out);
      have_last = true;
      if (worker_finished) continue;
      // The router stopped first (a stop string): the worker must stop too.
      context.TryCancel();
      break;
    }
    if (out.tokens_size() > 0 && !sink_->Send(std::move(out))) {
      client_gone = true;
      context.TryCancel();
      break;
    }
  }
  const grpc::Status status = stream.Finish();
  EndCall();
  if (worker_finished) attempt_.holds_reservation = false;
  if (client_gone || cancelled_.load()) return CancelledStatus();
  if (!bad_reply.ok()) {
    return WorkerFailed(attempt_.decode, "decode worker", "Decode",
                        rpc::ToGrpcStatus(bad_reply));
  }
  if (have_last) return sink_->Send(std::move(last)) ? absl::OkStatus() : CancelledStatus();
  if (stalled) {
    return WorkerFailed(
        attempt_.decode, "decode worker", "Decode",
        grpc::Status(grpc::StatusCode::UNAVAILABLE,
                     absl::StrFormat("stalled: no token for %.1f s",
                                     Seconds(absl::Now() - last_message_at))));
  }
  if (!status.ok()) return WorkerFailed(attempt_.decode, "decode worker", "Decode", status);
  return WorkerFailed(attempt_.decode, "decode worker", "Decode",
                      grpc::Status(grpc::StatusCode::INTERNAL,
                                   "ended the stream without a finish reason"));
}

void RequestDriver::Finalize(const engine::GenerationState& generation, v1::FinishReason reason,
                             v1::GenerateResponse& response) {
  const absl::Time now = absl::Now();
  finish_reason_ = reason;
  response.set_finish_reason(reason);
  response.mutable_usage()->set_prompt_tokens(generation.n_prompt());
  response.mutable_usage()->set_completion_tokens(generation.n_generated());
  response.mutable_usage()->set_cached_prompt_tokens(
      std::min(attempt_.prefill_response.n_cached_tokens(), generation.n_prompt()));
  v1::Timings& timings = *response.mutable_timings();
  timings.set_queue_seconds(Seconds(reserved_at_ - received_));
  timings.set_ttft_seconds(Seconds(first_token_at_ - received_));
  timings.set_e2e_seconds(Seconds(now - received_));
  timings.set_kv_bytes(attempt_.prefill_response.kv_bytes_sent());
  timings.set_kv_transfer_seconds(attempt_.prefill_response.kv_transfer_seconds());
  timings.set_kv_transport(attempt_.prefill_response.kv_transport());
  timings.set_spec_draft_tokens(attempt_.spec_draft_tokens);
  timings.set_spec_accepted_tokens(attempt_.spec_accepted_tokens);
  timings.set_mask_seconds(attempt_.mask_seconds);
  timings.set_prefill_cached_tokens(attempt_.prefill_response.n_cached_tokens());
  timings.set_decode_cached_tokens(attempt_.reservation.n_cached_tokens());
  if (attempt_.kv_sending_at != absl::InfinitePast()) {
    timings.set_kv_tail_seconds(Seconds(attempt_.kv_received_at - attempt_.kv_sending_at));
  }
  timings.set_prefill_worker(attempt_.prefill.address);
  timings.set_decode_worker(attempt_.decode.address);
  timings.set_migrations(migrations_);
}

void RequestDriver::ReleaseReservation() {
  if (!attempt_.holds_reservation) return;
  attempt_.holds_reservation = false;
  absl::StatusOr<std::shared_ptr<grpc::Channel>> channel =
      deps_.channels->Get(attempt_.decode.address);
  if (!channel.ok()) return;
  // Not waited for here, so that a stalled worker delays no migration; Run() waits for the last
  // attempt's (bounded by cleanup_timeout) before the request ends. Best effort: the worker's
  // lease frees the blocks if the call is lost.
  auto call = std::make_shared<ReleaseCall>();
  call->stub = v1::DecodeWorker::NewStub(*channel);
  rpc::PrepareContext(call->context, deps_.channels->options(),
                      absl::ToChronoTime(absl::Now() + deps_.options.cleanup_timeout));
  call->request.set_reservation_id(attempt_.reservation.reservation_id());
  attempt_.release = call;
  call->stub->async()->Release(&call->context, &call->request, &call->response,
                               [call](grpc::Status) { call->answered.Notify(); });
}

void RequestDriver::CancelPrefillCall() {
  absl::StatusOr<std::shared_ptr<grpc::Channel>> channel =
      deps_.channels->Get(attempt_.prefill.address);
  if (!channel.ok()) return;
  std::unique_ptr<v1::PrefillWorker::Stub> stub = v1::PrefillWorker::NewStub(*channel);
  grpc::ClientContext context;
  rpc::PrepareContext(context, deps_.channels->options(),
                      absl::ToChronoTime(absl::Now() + deps_.options.cleanup_timeout));
  v1::CancelRequest request;
  request.set_request_id(request_id_);
  v1::CancelResponse response;
  stub->CancelPrefill(&context, request, &response).ok();  // best effort, as Release
}

absl::Status RequestDriver::SetState(v1::RequestState state) {
  return deps_.table->SetState(request_id_, state);
}

absl::Status RequestDriver::CancelledStatus() const {
  return absl::CancelledError(absl::StrCat("request ", request_id_, " was cancelled"));
}

bool RequestDriver::BeginCall(grpc::ClientContext* context) {
  absl::MutexLock lock(&mu_);
  if (cancelled_.load()) return false;
  active_call_ = context;
  return true;
}

void RequestDriver::EndCall() {
  absl::MutexLock lock(&mu_);
  active_call_ = nullptr;
}

absl::Time RequestDriver::CallDeadline(absl::Duration timeout) const {
  return std::min(deadline_, absl::Now() + timeout);
}

}  // namespace baton::router
