// Drives one Generate request along the request's way (DESIGN.md):
//
//   tokenize + check -> pick a decode worker, Reserve its KV blocks (waiting in the router's queue
//   while none has room) -> pick a prefill worker, Prefill with the reservation -> first token to
//   the client -> Decode stream from the decode worker -> text deltas to the client.
//
// Every worker call is blocking, has a deadline, and runs on the request's pool thread (never on
// a gRPC callback). The text sent is what engine::GenerationState releases (complete UTF-8, stop
// strings held back and cut). A stop string ends the request at the router: the decode stream is
// cancelled and the reservation released. A failure that does not migrate (below) ends the
// request with a status naming the worker (UNAVAILABLE "prefill worker HOST:PORT unavailable:
// ..." when it is down) and releases the reservation. Cancel() (the client went away) cancels the worker call in flight; the
// request then releases its reservation and cancels its prefill. Every block the request held is
// freed on every path, except where the decode worker already ended the sequence itself.
//
// Migration (NVIDIA Dynamo's): when a worker fails the request (down, a Decode stream stalled
// past stall_timeout, a bad answer), the request moves to another prefill/decode pair: the prompt
// plus the tokens generated so far are prefilled there and the stream continues where it
// stopped. Sampling is keyed by (seed, position) and the arithmetic is batch-invariant, so the
// continued output is the one an uninterrupted run gives. At most max_migrations moves, never to
// a worker that failed the request before, and never past the request's deadline; when no other
// pair takes the request, the client hears the worker's failure.
//
// The request's state lives in the RequestTable and changes only through it.
//
// Thread-safety: Run() once, on a pool thread; Cancel() from any thread, any time.
#ifndef BATON_ROUTER_REQUEST_DRIVER_H_
#define BATON_ROUTER_REQUEST_DRIVER_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "baton/v1/router.pb.h"
#include "baton/v1/worker.pb.h"
#include "engine/generation_state.h"
#include "grpcpp/grpcpp.h"
#include "router/request_intake.h"
#include "router/prefix_affinity.h"
#include "router/request_table.h"
#include "router/served_model.h"
#include "router/worker_channels.h"
#include "router/worker_registry.h"

namespace baton::router {

// Where a request's responses go: the Generate reactor.
class ResponseSink {
 public:
  virtual ~ResponseSink() = default;
  // Queues a message for the client; blocks while too many are queued (back-pressure from a slow
  // client). False when the client is gone.
  virtual bool Send(v1::GenerateResponse response) = 0;
  // Ends the stream after the queued messages. The last call the driver makes on the sink.
  virtual void Close(const absl::Status& status) = 0;
};

struct RequestDriverOptions {
  absl::Duration reserve_timeout = absl::Seconds(10);    // one Reserve call
  absl::Duration reservation_lease = absl::Seconds(30);  // KV must arrive and Decode start within
  absl::Duration prefill_timeout = absl::Seconds(60);    // one Prefill call
  absl::Duration cleanup_timeout = absl::Seconds(5);     // Release, CancelPrefill
  // Retry placement at least this often while queued (also on every registry change).
  absl::Duration queue_poll_interval = absl::Milliseconds(500);
  // Reserve calls that fail with the worker down before the request gives up.
  int max_reserve_failures = 3;
  // A Decode stream that sends nothing for this long is stalled: the request leaves the worker.
  absl::Duration stall_timeout = absl::Seconds(30);
  // How many times a request whose worker dies, stalls or answers garbage moves to another
  // prefill/decode pair (prompt + tokens so far re-prefilled there). 0 = never.
  int max_migrations = 2;
  // How long a request waits while no healthy decode (or prefill) worker exists at all (one may
  // be restarting) before it fails with UNAVAILABLE, rather than waiting out its whole deadline.
  absl::Duration no_worker_wait = absl::Seconds(10);
};

// What every driver shares; owned by the Router, outliving every driver.
struct RequestDriverDeps {
  const ServedModel* model = nullptr;
  WorkerRegistry* registry = nullptr;
  RequestTable* table = nullptr;
  WorkerChannels* channels = nullptr;
  RequestDriverOptions options;
};

class RequestDriver {
 public:
  // The request must already be in deps.table under `request_id`. `deadline` bounds the whole
  // request (the client's deadline, or the router's default). `sink` must stay valid until the
  // driver calls its Close().
  RequestDriver(const RequestDriverDeps& deps, v1::GenerateRequest request, std::string request_id,
                absl::Time received, absl::Time deadline, ResponseSink* sink);
  RequestDriver(const RequestDriver&) = delete;
  RequestDriver& operator=(const RequestDriver&) = delete;

  // Serves the request to its end, then closes the sink and leaves the table.
  void Run();
  // The client went away: stop as soon as possible, freeing everything.
  void Cancel();

  const std::string& request_id() const { return request_id_; }

 private:
  absl::Status Drive();
  // One attempt: Reserve, Prefill and Decode from attempt_.prompt, streaming into `generation`.
  absl::Status RunAttempt(engine::GenerationState& generation);
  // Starts attempt_ afresh from what `generation` holds so far.
  void BeginAttempt(const engine::GenerationState& generation);
  // Frees what the attempt holds: its prefill (when `status` says it may still run) and its
  // reservation.
  void EndAttempt(const absl::Status& status);
  // Whether a failed attempt moves the request to another pair: a worker failed it, migrations
  // and the deadline are left, and the client is still there.
  bool ShouldMigrate(const absl::Status& status) const;
  // Records that `worker` failed this request and returns the error the client sees.
  absl::Status WorkerFailed(const Placement& worker, absl::string_view kind, absl::string_view rpc,
                            const grpc::Status& status);
  // The prefill worker's sampled token: into `generation` and to the client.
  absl::Status AcceptPrefillToken(engine::GenerationState& generation);
  // The prefill worker's prompt log-probabilities: one per prompt token after the first, each
  // with the top tokens asked for, when the attempt asked for them; none otherwise.
  absl::Status CheckPromptLogprobs() const;
  // The request's one line in the log (info): id, outcome, tokens, TTFT, E2E, workers.
  void LogRequestEnd(const absl::Status& status, absl::Time ended) const;
  absl::Status Reserve();
  absl::Status Prefill();
  // A prefill worker for the attempt; while none is healthy, waits for one (a restart) up to
  // no_worker_wait, then UNAVAILABLE.
  absl::StatusOr<Placement> AwaitPrefillWorker();
  absl::Status Decode(engine::GenerationState& generation);
  // Final fields of the last message.
  void Finalize(const engine::GenerationState& generation, v1::FinishReason reason,
                v1::GenerateResponse& response);
  // Starts releasing the attempt's reservation (attempt_.release), not waiting for the answer.
  void ReleaseReservation();
  void CancelPrefillCall();
  absl::Status SetState(v1::RequestState state);
  absl::Status CancelledStatus() const;

  // Registers the call's context so that Cancel() can cancel it; false when already cancelled.
  bool BeginCall(grpc::ClientContext* context);
  void EndCall();
  absl::Time CallDeadline(absl::Duration timeout) const;

  const RequestDriverDeps& deps_;
  const v1::GenerateRequest request_;
  const std::string request_id_;
  const absl::Time received_;
  const absl::Time deadline_;
  ResponseSink* const sink_;

  std::atomic<bool> cancelled_{false};
  absl::Mutex mu_;
  grpc::ClientContext* active_call_ ABSL_GUARDED_BY(mu_) = nullptr;

  struct ReleaseCall;
  // What one attempt (a prefill/decode pair serving the request) holds. A request that migrates
  // ends its attempt (EndAttempt) and starts another from where the stream stopped.
  struct Attempt {
    // The request's prompt followed by the tokens generated before this attempt, and the
    // sampling settings with the max_tokens still left: what the new pair computes from.
    std::vector<engine::TokenId> prompt;
    std::optional<PromptHashes> prompt_hashes;  // of `prompt`, for kv-aware placement
    v1::SamplingParams wire;
    Placement decode;
    Placement prefill;
    v1::ReserveResponse reservation;
    bool holds_reservation = false;  // a reservation exists that the decode worker has not ended
    bool prefill_started = false;
    bool prefill_done = false;
    v1::PrefillResponse prefill_response;
    absl::Time kv_sending_at = absl::InfinitePast();  // the prefill worker's forward pass done
    absl::Time kv_received_at;
    // Speculative decoding on the decode worker so far (its latest message's counts).
    int32_t spec_draft_tokens = 0;
    int32_t spec_accepted_tokens = 0;
    double mask_seconds = 0;  // structured output's masks on the decode worker so far
    // The worker whose failure (down, stalled, bad answer) ended the attempt; empty otherwise.
    std::string failed_worker_id;
    std::shared_ptr<ReleaseCall> release;  // the reservation's Release call, once started
  };

  // Request thread only.
  PreparedRequest prepared_;
  Attempt attempt_;
  // Workers that failed this request: a migration never places it on them again.
  WorkerIdSet failed_workers_;
  int32_t migrations_ = 0;
  absl::Time reserved_at_;
  absl::Time first_token_at_;
  // For the metrics and the log line when the request ends: the finish reason (set by Finalize)
  // and the tokens generated so far.
  v1::FinishReason finish_reason_ = v1::FINISH_REASON_UNSPECIFIED;
  int32_t n_generated_ = 0;
};

}  // namespace baton::router

#endif  // BATON_ROUTER_REQUEST_DRIVER_H_
