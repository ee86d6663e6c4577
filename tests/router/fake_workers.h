// Fake prefill and decode workers for router tests: real gRPC servers (callback API) that answer
// with scripted tokens and record what the router asked of them. No model runs.
//
// Thread-safety: thread-safe; tests read the records through the accessors (copies).
#ifndef BATON_TESTS_ROUTER_FAKE_WORKERS_H_
#define BATON_TESTS_ROUTER_FAKE_WORKERS_H_

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "baton/v1/worker.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "router/served_model.h"
#include "rpc/prefill_stage.h"
#include "rpc/server_options.h"
#include "tests/support/test_paths.h"

namespace baton::router::testing {

inline constexpr int32_t kFakeBlockSize = 16;

// Polls `done` until it holds or `timeout` passes.
inline bool WaitUntil(const std::function<bool()>& done,
                      absl::Duration timeout = absl::Seconds(10)) {
  const absl::Time end = absl::Now() + timeout;
  while (absl::Now() < end) {
    if (done()) return true;
    absl::SleepFor(absl::Milliseconds(5));
  }
  return done();
}

inline grpc::ServerUnaryReactor* FinishUnary(grpc::CallbackServerContext* context,
                                             const grpc::Status& status) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(status);
  return reactor;
}

class FakePrefillWorker final : public v1::PrefillWorker::CallbackService {
 public:
  enum class Mode {
    kAnswer,  // answer with first_token
    kFail,    // answer with `failure`
    kFailKvDestination,  // answer with `failure`, blaming the push to the decode worker
    kHang,    // never answer; end when the router cancels the call
  };

  explicit FakePrefillWorker(v1::ModelIdentity model) : model_(std::move(model)) {}

  void set_mode(Mode mode, grpc::Status failure = grpc::Status::OK) {
    absl::MutexLock lock(&mu_);
    mode_ = mode;
    failure_ = std::move(failure);
  }
  void set_first_token(int32_t token) {
    absl::MutexLock lock(&mu_);
    first_token_ = token;
  }
  // Sent with the first token when set (the request's sampling decides nothing here).
  void set_first_token_logprobs(std::optional<v1::TokenLogprobs> logprobs) {
    absl::MutexLock lock(&mu_);
    first_token_logprobs_ = std::move(logprobs);
  }
  // Sent with the first token when not empty (whatever the request asked).
  void set_prompt_logprobs(std::vector<v1::TokenLogprobs> logprobs) {
    absl::MutexLock lock(&mu_);
    prompt_logprobs_ = std::move(logprobs);
  }
  std::vector<v1::PrefillRequest> prefills() {
    absl::MutexLock lock(&mu_);
    return prefills_;
  }
  std::vector<std::string> cancel_prefills() {
    absl::MutexLock lock(&mu_);
    return cancel_prefills_;
  }
  int cancelled_calls() {
    absl::MutexLock lock(&mu_);
    return cancelled_calls_;
  }

  grpc::ServerUnaryReactor* Prefill(grpc::CallbackServerContext* context,
                                    const v1::PrefillRequest* request,
                                    v1::PrefillResponse* response) override {
    absl::MutexLock lock(&mu_);
    prefills_.push_back(*request);
    switch (mode_) {
      case Mode::kAnswer:
        response->set_first_token(first_token_);
        if (first_token_logprobs_.has_value()) {
          *response->mutable_first_token_logprobs() = *first_token_logprobs_;
        }
        for (const v1::TokenLogprobs& logprobs : prompt_logprobs_) {
          *response->add_prompt_logprobs() = logprobs;
        }
        response->set_kv_bytes_sent(12345);
        response->set_kv_transfer_seconds(0.25);
        response->set_prefill_seconds(0.5);
        response->set_n_prompt_tokens(request->prompt_tokens_size());
        return FinishUnary(context, grpc::Status::OK);
      case Mode::kFail:
        return FinishUnary(context, failure_);
      case Mode::kFailKvDestination:
        context->AddTrailingMetadata(std::string(rpc::kPrefillFaultKey),
                                     std::string(rpc::kPrefillFaultKvDestination));
        return FinishUnary(context, failure_);
      case Mode::kHang:
        return new HangingCall(this);
    }
    return FinishUnary(context, grpc::Status(grpc::StatusCode::INTERNAL, "bad mode"));
  }

  grpc::ServerUnaryReactor* CancelPrefill(grpc::CallbackServerContext* context,
                                          const v1::CancelRequest* request,
                                          v1::CancelResponse* response) override {
    absl::MutexLock lock(&mu_);
    cancel_prefills_.push_back(request->request_id());
    response->set_found(true);
    return FinishUnary(context, grpc::Status::OK);
  }

  grpc::ServerUnaryReactor* Status(grpc::CallbackServerContext* context,
                                   const v1::StatusRequest* request,
                                   v1::StatusResponse* response) override {
    response->set_role(v1::WORKER_ROLE_PREFILL);
    *response->mutable_model() = model_;
    return FinishUnary(context, grpc::Status::OK);
  }

 private:
  // A Prefill that only ends when the caller cancels it.
  class HangingCall final : public grpc::ServerUnaryReactor {
   public:
    explicit HangingCall(FakePrefillWorker* worker) : worker_(worker) {}
    void OnCancel() override {
      {
        absl::MutexLock lock(&worker_->mu_);
        ++worker_->cancelled_calls_;
      }
      Finish(grpc::Status::CANCELLED);
    }
    void OnDone() override { delete this; }

   private:
    FakePrefillWorker* worker_;
  };

  const v1::ModelIdentity model_;
  absl::Mutex mu_;
  Mode mode_ ABSL_GUARDED_BY(mu_) = Mode::kAnswer;
  grpc::Status failure_ ABSL_GUARDED_BY(mu_);
  int32_t first_token_ ABSL_GUARDED_BY(mu_) = 0;
  std::optional<v1::TokenLogprobs> first_token_logprobs_ ABSL_GUARDED_BY(mu_);
  std::vector<v1::TokenLogprobs> prompt_logprobs_ ABSL_GUARDED_BY(mu_);
  std::vector<v1::PrefillRequest> prefills_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> cancel_prefills_ ABSL_GUARDED_BY(mu_);
  int cancelled_calls_ ABSL_GUARDED_BY(mu_) = 0;
};

class FakeDecodeWorker final : public v1::DecodeWorker::CallbackService {
 public:
  struct Script {
    std::vector<int32_t> tokens;  // streamed after the first token, one per message
    // Sent beside the tokens when not empty: logprobs[i] with tokens[i] (none past its end).
    std::vector<v1::TokenLogprobs> logprobs;
    // True: after the tokens, keep the stream open until the router cancels it. False: the last
    // message carries `finish_reason` and the stream ends with `end_status`.
    bool hold_open = false;
    v1::FinishReason finish_reason = v1::FINISH_REASON_STOP;
    grpc::Status end_status = grpc::Status::OK;
  };

  explicit FakeDecodeWorker(v1::ModelIdentity model) : model_(std::move(model)) {
    load_.set_kv_blocks_free(1000);
    load_.set_kv_blocks_total(1000);
  }

  void set_script(Script script) {
    absl::MutexLock lock(&mu_);
    script_ = std::move(script);
  }
  void set_free_blocks(int32_t free) {
    absl::MutexLock lock(&mu_);
    load_.set_kv_blocks_free(free);
  }
  void set_running_sequences(int32_t n) {
    absl::MutexLock lock(&mu_);
    load_.set_running_sequences(n);
  }
  std::vector<v1::ReserveRequest> reserves() {
    absl::MutexLock lock(&mu_);
    return reserves_;
  }
  std::vector<std::string> reservation_ids() {
    absl::MutexLock lock(&mu_);
    return reservation_ids_;
  }
  std::vector<v1::DecodeRequest> decodes() {
    absl::MutexLock lock(&mu_);
    return decodes_;
  }
  std::vector<std::string> releases() {
    absl::MutexLock lock(&mu_);
    return releases_;
  }
  int cancelled_streams() {
    absl::MutexLock lock(&mu_);
    return cancelled_streams_;
  }

  grpc::ServerUnaryReactor* Reserve(grpc::CallbackServerContext* context,
                                    const v1::ReserveRequest* request,
                                    v1::ReserveResponse* response) override {
    absl::MutexLock lock(&mu_);
    reserves_.push_back(*request);
    const std::string id = absl::StrCat("res-", reserves_.size());
    reservation_ids_.push_back(id);
    response->set_reservation_id(id);
    response->set_n_blocks((request->n_prompt_tokens() + request->max_tokens() + kFakeBlockSize -
                            1) /
                           kFakeBlockSize);
    *response->mutable_model() = model_;
    return FinishUnary(context, grpc::Status::OK);
  }

  grpc::ServerWriteReactor<v1::DecodeResponse>* Decode(grpc::CallbackServerContext* context,
                                                       const v1::DecodeRequest* request) override {
    Script script;
    {
      absl::MutexLock lock(&mu_);
      decodes_.push_back(*request);
      script = script_;
    }
    return new Stream(this, std::move(script));
  }

  grpc::ServerUnaryReactor* Release(grpc::CallbackServerContext* context,
                                    const v1::ReleaseRequest* request,
                                    v1::ReleaseResponse* response) override {
    absl::MutexLock lock(&mu_);
    releases_.push_back(request->reservation_id());
    response->set_found(true);
    return FinishUnary(context, grpc::Status::OK);
  }

  grpc::ServerUnaryReactor* Status(grpc::CallbackServerContext* context,
                                   const v1::StatusRequest* request,
                                   v1::StatusResponse* response) override {
    absl::MutexLock lock(&mu_);
    response->set_role(v1::WORKER_ROLE_DECODE);
    *response->mutable_model() = model_;
    *response->mutable_load() = load_;
    return FinishUnary(context, grpc::Status::OK);
  }

 private:
  // Writes the script's tokens one message at a time. No gRPC operation starts under mu_.
  class Stream final : public grpc::ServerWriteReactor<v1::DecodeResponse> {
   public:
    Stream(FakeDecodeWorker* worker, Script script)
        : worker_(worker), script_(std::move(script)) {
      Step();
    }
    void OnWriteDone(bool ok) override {
      bool finish = false;
      {
        absl::MutexLock lock(&mu_);
        writing_ = false;
        if (!ok || cancelled_) finish = !std::exchange(finished_, true);
      }
      if (finish) {
        Finish(grpc::Status::CANCELLED);
        return;
      }
      Step();
    }
    void OnCancel() override {
      {
        absl::MutexLock lock(&worker_->mu_);
        ++worker_->cancelled_streams_;
      }
      bool finish = false;
      {
        absl::MutexLock lock(&mu_);
        cancelled_ = true;
        if (!writing_) finish = !std::exchange(finished_, true);
      }
      if (finish) Finish(grpc::Status::CANCELLED);
    }
    void OnDone() override { delete this; }

   private:
    void Step() {
      bool write = false;
      bool finish = false;
      {
        absl::MutexLock lock(&mu_);
        if (cancelled_ || finished_) return;
        const size_t n = script_.tokens.size();
        if (next_ < n || (n == 0 && next_ == 0 && !script_.hold_open)) {
          message_.Clear();
          if (n > 0) message_.add_tokens(script_.tokens[next_]);
          if (next_ < script_.logprobs.size()) *message_.add_logprobs() = script_.logprobs[next_];
          ++next_;
          message_.set_n_generated(static_cast<int32_t>(next_) + 1);
          if (next_ >= n && !script_.hold_open) message_.set_finish_reason(script_.finish_reason);
          writing_ = true;
          write = true;
        } else if (!script_.hold_open) {
          finished_ = true;
          finish = true;
        }
        // hold_open: wait for OnCancel.
      }
      if (write) StartWrite(&message_);
      if (finish) Finish(script_.end_status);
    }

    FakeDecodeWorker* const worker_;
    const Script script_;
    absl::Mutex mu_;
    v1::DecodeResponse message_;  // owned by the write in flight
    size_t next_ ABSL_GUARDED_BY(mu_) = 0;
    bool writing_ ABSL_GUARDED_BY(mu_) = false;
    bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
    bool finished_ ABSL_GUARDED_BY(mu_) = false;
  };

  const v1::ModelIdentity model_;
  absl::Mutex mu_;
  Script script_ ABSL_GUARDED_BY(mu_);
  v1::WorkerLoad load_ ABSL_GUARDED_BY(mu_);
  std::vector<v1::ReserveRequest> reserves_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> reservation_ids_ ABSL_GUARDED_BY(mu_);
  std::vector<v1::DecodeRequest> decodes_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> releases_ ABSL_GUARDED_BY(mu_);
  int cancelled_streams_ ABSL_GUARDED_BY(mu_) = 0;
};

// A service on 127.0.0.1 with an OS-picked port.
struct FakeServer {
  std::unique_ptr<grpc::Server> server;
  int port = 0;
  std::string address() const { return absl::StrCat("127.0.0.1:", port); }
};

inline FakeServer StartFakeServer(grpc::Service* service) {
  absl::StatusOr<rpc::StartedServer> started = rpc::StartServer({}, {service});
  FakeServer out;
  if (!started.ok()) return out;
  out.server = std::move(started->server);
  out.port = started->port;
  return out;
}

// A test with the default model as the router serves it (loaded once per suite) and a fake
// prefill and a fake decode worker serving that model, each on its own loopback server.
class FakeWorkersTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    absl::StatusOr<std::unique_ptr<ServedModel>> m =
        ServedModel::Load(test_support::DefaultModelPath());
    ASSERT_TRUE(m.ok()) << m.status();
    model_ = m->release();
  }
  static void TearDownTestSuite() {
    delete model_;
    model_ = nullptr;
  }

  void SetUp() override {
    v1::ModelIdentity identity;
    identity.set_name(model_->id());
    identity.set_fingerprint(model_->fingerprint());
    identity.set_block_size(kFakeBlockSize);
    identity.set_n_ctx(model_->n_ctx());
    prefill_ = std::make_unique<FakePrefillWorker>(identity);
    decode_ = std::make_unique<FakeDecodeWorker>(identity);
    prefill_server_ = StartFakeServer(prefill_.get());
    decode_server_ = StartFakeServer(decode_.get());
    ASSERT_NE(prefill_server_.port, 0);
    ASSERT_NE(decode_server_.port, 0);
  }

  inline static ServedModel* model_ = nullptr;
  std::unique_ptr<FakePrefillWorker> prefill_;
  std::unique_ptr<FakeDecodeWorker> decode_;
  FakeServer prefill_server_;
  FakeServer decode_server_;
};

}  // namespace baton::router::testing

#endif  // BATON_TESTS_ROUTER_FAKE_WORKERS_H_
