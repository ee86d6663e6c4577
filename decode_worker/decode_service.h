// The DecodeWorker gRPC service (proto/baton/v1/worker.proto): Reserve, Decode (a server stream
// per running sequence), Release, Status.
//
// Thread-safety: thread-safe. Handlers never block: Decode admits its sequence into the decode
// batch and returns a reactor that the engine thread feeds.
#ifndef BATON_DECODE_WORKER_DECODE_SERVICE_H_
#define BATON_DECODE_WORKER_DECODE_SERVICE_H_

#include <chrono>
#include <functional>
#include <string>

#include "baton/v1/worker.grpc.pb.h"
#include "decode_worker/decode_batch.h"
#include "decode_worker/reservation_table.h"
#include "grammar/output_grammar.h"

namespace baton::decode_worker {

struct DecodeServiceOptions {
  baton::v1::ModelIdentity model;
  // The worker's role now (it may change in place): what Status reports; a role without the
  // decode side refuses new reservations (rpc::CheckServes), while what it holds runs on.
  std::function<baton::v1::WorkerRole()> role = [] { return baton::v1::WORKER_ROLE_DECODE; };
  std::chrono::milliseconds default_lease{30000};
  int32_t n_vocab = 0;
  // Compiles the output constraints of structured output (on the Decode call's thread, not the
  // engine loop); null: constrained requests are refused. Must outlive the service.
  grammar::OutputGrammarCompiler* grammars = nullptr;
};

class DecodeService final : public baton::v1::DecodeWorker::CallbackService {
 public:
  // `load` fills the Status answer; `wake` tells the engine loop that work arrived.
  DecodeService(ReservationTable* reservations, DecodeBatch* batch, DecodeServiceOptions options,
                std::function<baton::v1::WorkerLoad()> load, std::function<void()> wake);

  grpc::ServerUnaryReactor* Reserve(grpc::CallbackServerContext* context,
                                    const baton::v1::ReserveRequest* request,
                                    baton::v1::ReserveResponse* response) override;
  grpc::ServerWriteReactor<baton::v1::DecodeResponse>* Decode(
      grpc::CallbackServerContext* context, const baton::v1::DecodeRequest* request) override;
  grpc::ServerUnaryReactor* Release(grpc::CallbackServerContext* context,
                                    const baton::v1::ReleaseRequest* request,
                                    baton::v1::ReleaseResponse* response) override;
  grpc::ServerUnaryReactor* Status(grpc::CallbackServerContext* context,
                                   const baton::v1::StatusRequest* request,
                                   baton::v1::StatusResponse* response) override;

 private:
  ReservationTable& reservations_;
  DecodeBatch& batch_;
  const DecodeServiceOptions options_;
  const std::function<baton::v1::WorkerLoad()> load_;
  const std::function<void()> wake_;
};

}  // namespace baton::decode_worker

#endif  // BATON_DECODE_WORKER_DECODE_SERVICE_H_
