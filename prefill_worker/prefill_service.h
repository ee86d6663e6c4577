// The PrefillWorker gRPC service (proto/baton/v1/worker.proto): Prefill, CancelPrefill, Status.
//
// Thread-safety: thread-safe. Prefill validates the request, queues a job and returns; the job's
// completion (on a scheduler thread) finishes the call.
#ifndef BATON_PREFILL_WORKER_PREFILL_SERVICE_H_
#define BATON_PREFILL_WORKER_PREFILL_SERVICE_H_

#include <functional>
#include <string>

#include "baton/v1/worker.grpc.pb.h"
#include "grammar/output_grammar.h"
#include "prefill_worker/prefill_scheduler.h"

namespace baton::prefill_worker {

struct PrefillServiceOptions {
  baton::v1::ModelIdentity model;
  // The worker's role now (it may change in place): what Status reports; a role without the
  // prefill side refuses new prompts (rpc::CheckServes).
  std::function<baton::v1::WorkerRole()> role = [] { return baton::v1::WORKER_ROLE_PREFILL; };
  int32_t n_vocab = 0;
  int32_t max_prompt_tokens = 0;  // the largest prompt the scratch KV cache holds
  std::chrono::milliseconds default_deadline{60000};  // for callers that set no deadline
  // Compiles the output constraints of structured output (on the Prefill call's thread, not the
  // engine loop); null: constrained requests are refused. Must outlive the service.
  grammar::OutputGrammarCompiler* grammars = nullptr;
};

class PrefillService final : public baton::v1::PrefillWorker::CallbackService {
 public:
  PrefillService(PrefillScheduler* scheduler, PrefillServiceOptions options,
                 std::function<baton::v1::WorkerLoad()> load, std::function<void()> wake);

  grpc::ServerUnaryReactor* Prefill(grpc::CallbackServerContext* context,
                                    const baton::v1::PrefillRequest* request,
                                    baton::v1::PrefillResponse* response) override;
  grpc::ServerUnaryReactor* CancelPrefill(grpc::CallbackServerContext* context,
                                          const baton::v1::CancelRequest* request,
                                          baton::v1::CancelResponse* response) override;
  grpc::ServerUnaryReactor* Status(grpc::CallbackServerContext* context,
                                   const baton::v1::StatusRequest* request,
                                   baton::v1::StatusResponse* response) override;

 private:
  absl::Status Validate(const baton::v1::PrefillRequest& request) const;

  PrefillScheduler& scheduler_;
  const PrefillServiceOptions options_;
  const std::function<baton::v1::WorkerLoad()> load_;
  const std::function<void()> wake_;
};

}  // namespace baton::prefill_worker

#endif  // BATON_PREFILL_WORKER_PREFILL_SERVICE_H_
