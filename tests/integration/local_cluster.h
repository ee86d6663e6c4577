// Real baton processes on loopback for integration tests: a router and workers started from the
// build's `baton` binary, with gRPC stubs to talk to them.
#ifndef BATON_TESTS_INTEGRATION_LOCAL_CLUSTER_H_
#define BATON_TESTS_INTEGRATION_LOCAL_CLUSTER_H_

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "baton/v1/router.grpc.pb.h"
#include "baton/v1/worker.grpc.pb.h"
#include "cli/child_process.h"
#include "rpc/server_options.h"
#include "tests/support/test_paths.h"

namespace baton::test_support {

struct Proc {
  std::unique_ptr<cli::ChildProcess> process;
  std::string address;
  std::string role;  // "router", "prefill", "decode" or "both"
};

class LocalCluster {
 public:
  // `common_args` go to every process (e.g. --token T, TLS flags); `client` is how the test dials.
  LocalCluster(std::vector<std::string> common_args, rpc::ClientOptions client)
      : common_args_(std::move(common_args)), client_(std::move(client)) {}

  // The model every process started after this serves (the default model unless set).
  void set_model(std::string path) { model_ = std::move(path); }

  absl::Status StartRouter(std::vector<std::string> extra = {});
  // The router started as `wrapper` + its command line (e.g. in a mount namespace of its own).
  absl::Status StartRouterWrapped(std::vector<std::string> wrapper,
                                  std::vector<std::string> extra = {});
  // Another router replica (started before the workers, which report to every router).
  absl::StatusOr<Proc*> AddRouter(std::vector<std::string> extra = {});
  // Starts `router` again on its address after it was killed.
  absl::Status RestartRouter(Proc& router, std::vector<std::string> extra = {});
  // role: "prefill", "decode" or "both". It reports to every router started before it (none:
  // it waits to be found by a router's --prefill/--decode dns: discovery).
  absl::StatusOr<Proc*> StartWorker(const std::string& role, std::vector<std::string> extra = {});
  // Waits until the router (the first unless named) reports `n` healthy workers.
  absl::Status WaitHealthy(size_t n, std::chrono::seconds timeout = std::chrono::seconds(60),
                           const std::string& router_address = "");

  const std::string& router_address() const { return router_.address; }
  std::unique_ptr<baton::v1::Router::Stub> RouterStub() const;
  std::unique_ptr<baton::v1::Router::Stub> RouterStub(const std::string& address) const;
  std::unique_ptr<baton::v1::DecodeWorker::Stub> DecodeStub(const std::string& address) const;
  std::unique_ptr<baton::v1::PrefillWorker::Stub> PrefillStub(const std::string& address) const;
  void Prepare(grpc::ClientContext& context,
               std::chrono::milliseconds timeout = std::chrono::seconds(60)) const;

  // A decode worker's load, from its Status RPC.
  absl::StatusOr<baton::v1::WorkerLoad> DecodeLoad(const std::string& address) const;
  // A worker's load, from its role's Status RPC.
  absl::StatusOr<baton::v1::WorkerLoad> Load(const Proc& worker) const;
  // Polls until every worker this cluster started that is still running (killed ones are left
  // out), prefill and decode alike, holds no KV block, reservation, sequence or queued prompt.
  // OK then; otherwise, once `timeout` passes, an error naming each worker that still holds
  // something and what.
  absl::Status WaitEveryWorkerFree(
      std::chrono::milliseconds timeout = std::chrono::seconds(15)) const;

  Proc& router() { return router_; }

 private:
  std::shared_ptr<grpc::Channel> Channel(const std::string& address) const;
  // The load from a worker stub's Status RPC.
  template <typename Stub>
  absl::StatusOr<baton::v1::WorkerLoad> LoadFrom(Stub& stub) const;

  std::vector<std::string> common_args_;
  rpc::ClientOptions client_;
  std::string model_ = DefaultModelPath();
  // A router process with `extra` flags into `router`.
  absl::Status LaunchRouter(Proc& router, std::vector<std::string> extra,
                            std::vector<std::string> wrapper = {});

  Proc router_;
  std::vector<std::unique_ptr<Proc>> more_routers_;
  std::vector<std::unique_ptr<Proc>> workers_;
};

// Reads a whole Generate stream: concatenated text, token ids, the last message, the status.
struct GenerateOutcome {
  std::string text;
  std::vector<int32_t> tokens;
  baton::v1::GenerateResponse last;
  grpc::Status status;
};
GenerateOutcome RunGenerate(baton::v1::Router::Stub& stub, grpc::ClientContext& context,
                            const baton::v1::GenerateRequest& request);

// A sampled request (temperature 0.8, top-p 0.95, `seed`) for 120 tokens, end of generation
// ignored: its output is the same on any worker pair, which migration tests compare against.
baton::v1::GenerateRequest SampledStoryRequest(uint64_t seed);

std::string BatonBinary();

// A `baton` command line's exit code (-1 when it did not exit normally) and its stdout and stderr
// together.
struct CommandResult {
  int exit_code = -1;
  std::string output;
};
// Runs `baton ARGS` through the shell (ARGS as a shell would split them) and waits for it.
CommandResult RunBaton(const std::string& args);

}  // namespace baton::test_support

#endif  // BATON_TESTS_INTEGRATION_LOCAL_CLUSTER_H_
