#include "tests/integration/local_cluster.h"

#include <sys/wait.h>

#include <cstdio>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "tests/support/test_paths.h"

namespace baton::test_support {

baton::v1::GenerateRequest SampledStoryRequest(uint64_t seed) {
  baton::v1::GenerateRequest request;
  request.set_prompt("Write a short story about a lighthouse keeper:");
  baton::v1::SamplingParams& sampling = *request.mutable_sampling();
  sampling.set_temperature(0.8f);
  sampling.set_top_p(0.95f);
  sampling.set_seed(seed);
  sampling.set_max_tokens(120);
  sampling.set_ignore_eos(true);
  return request;
}

std::string BatonBinary() { return std::string(BATON_BINARY_DIR) + "/bin/baton"; }

CommandResult RunBaton(const std::string& args) {
  const std::string line = BatonBinary() + " " + args + " 2>&1";
  CommandResult result;
  FILE* pipe = popen(line.c_str(), "r");
  if (pipe == nullptr) return result;
  char buffer[4096];
  while (size_t n = fread(buffer, 1, sizeof(buffer), pipe)) result.output.append(buffer, n);
  const int status = pclose(pipe);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return result;
}

absl::Status LocalCluster::LaunchRouter(Proc& router, std::vector<std::string> extra,
                                        std::vector<std::string> wrapper) {
  std::vector<std::string> argv = std::move(wrapper);
  argv.insert(argv.end(), {BatonBinary(), "router", "--model", model_, "--heartbeat-ms", "200"});
  argv.insert(argv.end(), common_args_.begin(), common_args_.end());
  argv.insert(argv.end(), extra.begin(), extra.end());
  absl::StatusOr<std::unique_ptr<cli::ChildProcess>> p = cli::ChildProcess::Start(argv);
  if (!p.ok()) return p.status();
  router.process = std::move(*p);
  absl::StatusOr<std::string> address =
      router.process->WaitForLine("listening on ", std::chrono::seconds(60));
  if (!address.ok()) return address.status();
  router.address = *address;
  router.role = "router";
  return absl::OkStatus();
}

absl::Status LocalCluster::StartRouter(std::vector<std::string> extra) {
  return LaunchRouter(router_, std::move(extra));
}

absl::Status LocalCluster::StartRouterWrapped(std::vector<std::string> wrapper,
                                              std::vector<std::string> extra) {
  return LaunchRouter(router_, std::move(extra), std::move(wrapper));
}

absl::StatusOr<Proc*> LocalCluster::AddRouter(std::vector<std::string> extra) {
  auto router = std::make_unique<Proc>();
  if (absl::Status s = LaunchRouter(*router, std::move(extra)); !s.ok()) return s;
  more_routers_.push_back(std::move(router));
  return more_routers_.back().get();
}

absl::Status LocalCluster::RestartRouter(Proc& router, std::vector<std::string> extra) {
  const std::string address = router.address;
  const std::string port = address.substr(address.rfind(':') + 1);
  extra.insert(extra.end(), {"--port", port});
  if (absl::Status s = LaunchRouter(router, std::move(extra)); !s.ok()) return s;
  if (router.address != address) {
    return absl::InternalError(absl::StrCat("restarted on ", router.address, ", not ", address));
  }
  return absl::OkStatus();
}

absl::StatusOr<Proc*> LocalCluster::StartWorker(const std::string& role,
                                                std::vector<std::string> extra) {
  std::vector<std::string> argv = {BatonBinary(), "worker", "--role", role, "--model", model_,
                                   "--threads", "1", "--kv-cache-memory", "128M"};
  if (!router_.address.empty()) {  // else found by a router's discovery, started later
    std::string routers = router_.address;
    for (const auto& r : more_routers_) absl::StrAppend(&routers, ",", r->address);
    argv.insert(argv.end(), {"--router", routers});
  }
  argv.insert(argv.end(), common_args_.begin(), common_args_.end());
  argv.insert(argv.end(), extra.begin(), extra.end());
  absl::StatusOr<std::unique_ptr<cli::ChildProcess>> p = cli::ChildProcess::Start(argv);
  if (!p.ok()) return p.status();
  auto proc = std::make_unique<Proc>();
  proc->process = std::move(*p);
  absl::StatusOr<std::string> address =
      proc->process->WaitForLine("listening on ", std::chrono::seconds(60));
  if (!address.ok()) return address.status();
  proc->address = *address;
  proc->role = role;
  workers_.push_back(std::move(proc));
  return workers_.back().get();
}

std::shared_ptr<grpc::Channel> LocalCluster::Channel(const std::string& address) const {
  absl::StatusOr<std::shared_ptr<grpc::Channel>> channel = rpc::MakeChannel(address, client_);
  if (channel.ok()) return *std::move(channel);
  // The client options are the test's (unreadable TLS files): the test fails, and calls through the
  // plain channel returned instead fail rather than crash.
  ADD_FAILURE() << "no channel to " << address << ": " << channel.status();
  return grpc::CreateChannel(address, grpc::InsecureChannelCredentials());
}

std::unique_ptr<baton::v1::Router::Stub> LocalCluster::RouterStub() const {
  return RouterStub(router_.address);
}
std::unique_ptr<baton::v1::Router::Stub> LocalCluster::RouterStub(
    const std::string& address) const {
  return baton::v1::Router::NewStub(Channel(address));
}
std::unique_ptr<baton::v1::DecodeWorker::Stub> LocalCluster::DecodeStub(
    const std::string& address) const {
  return baton::v1::DecodeWorker::NewStub(Channel(address));
}
std::unique_ptr<baton::v1::PrefillWorker::Stub> LocalCluster::PrefillStub(
    const std::string& address) const {
  return baton::v1::PrefillWorker::NewStub(Channel(address));
}

void LocalCluster::Prepare(grpc::ClientContext& context, std::chrono::milliseconds timeout) const {
  rpc::PrepareContext(context, client_, std::chrono::system_clock::now() + timeout);
}

absl::Status LocalCluster::WaitHealthy(size_t n, std::chrono::seconds timeout,
                                       const std::string& router_address) {
  auto stub = RouterStub(router_address.empty() ? router_.address : router_address);
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    grpc::ClientContext context;
    Prepare(context, std::chrono::seconds(2));
    baton::v1::ClusterStatusResponse status;
    if (stub->ClusterStatus(&context, {}, &status).ok()) {
      size_t healthy = 0;
      for (const auto& w : status.workers()) healthy += w.healthy();
      if (healthy >= n) return absl::OkStatus();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return absl::DeadlineExceededError(absl::StrCat("fewer than ", n, " healthy workers"));
}

template <typename Stub>
absl::StatusOr<baton::v1::WorkerLoad> LocalCluster::LoadFrom(Stub& stub) const {
  grpc::ClientContext context;
  Prepare(context, std::chrono::seconds(5));
  baton::v1::StatusResponse response;
  grpc::Status status = stub.Status(&context, {}, &response);
  if (!status.ok()) return absl::UnavailableError(status.error_message());
  return response.load();
}

absl::StatusOr<baton::v1::WorkerLoad> LocalCluster::DecodeLoad(const std::string& address) const {
  return LoadFrom(*DecodeStub(address));
}

absl::StatusOr<baton::v1::WorkerLoad> LocalCluster::Load(const Proc& worker) const {
  if (worker.role != "prefill") return DecodeLoad(worker.address);
  return LoadFrom(*PrefillStub(worker.address));
}

namespace {

// What a worker still holds, "" when nothing.
std::string Held(const baton::v1::WorkerLoad& load) {
  std::string held;
  if (load.kv_blocks_free() != load.kv_blocks_total()) {
    absl::StrAppend(&held, " ", load.kv_blocks_total() - load.kv_blocks_free(), " KV blocks");
  }
  if (load.reservations() != 0) absl::StrAppend(&held, " ", load.reservations(), " reservations");
  if (load.running_sequences() != 0) {
    absl::StrAppend(&held, " ", load.running_sequences(), " sequences");
  }
  if (load.queued_prompt_tokens() != 0) {
    absl::StrAppend(&held, " ", load.queued_prompt_tokens(), " queued prompt tokens");
  }
  return held;
}

}  // namespace

absl::Status LocalCluster::WaitEveryWorkerFree(std::chrono::milliseconds timeout) const {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::string problems;
  do {
    problems.clear();
    for (const std::unique_ptr<Proc>& worker : workers_) {
      if (worker->process->Wait(std::chrono::milliseconds(0)).ok()) continue;  // exited
      absl::StatusOr<baton::v1::WorkerLoad> load = Load(*worker);
      const std::string held = load.ok() ? Held(*load) : " no answer: " + load.status().ToString();
      if (!held.empty()) absl::StrAppend(&problems, "; ", worker->role, " ", worker->address, held);
    }
    if (problems.empty()) return absl::OkStatus();
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  } while (std::chrono::steady_clock::now() < deadline);
  return absl::DeadlineExceededError(absl::StrCat("workers still hold", problems.substr(1)));
}

GenerateOutcome RunGenerate(baton::v1::Router::Stub& stub, grpc::ClientContext& context,
                            const baton::v1::GenerateRequest& request) {
  GenerateOutcome outcome;
  auto reader = stub.Generate(&context, request);
  baton::v1::GenerateResponse response;
  while (reader->Read(&response)) {
    outcome.text += response.text();
    outcome.tokens.insert(outcome.tokens.end(), response.tokens().begin(), response.tokens().end());
    outcome.last = response;
  }
  outcome.status = reader->Finish();
  return outcome;
}

}  // namespace baton::test_support
