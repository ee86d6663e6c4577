// baton up [--config FILE]: a local cluster — the router and its workers as processes — healthy
// and announced on stdout ("router: HOST:PORT", then the OpenAI-compatible HTTP API's
// "http: HOST:PORT"), until SIGINT/SIGTERM drains and stops it.
#include <signal.h>

#include <filesystem>
#include <iostream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "baton/v1/router.grpc.pb.h"
#include "cli/child_process.h"
#include "cli/cluster_config.h"
#include "cli/command.h"
#include "cli/serve_flags.h"
#include "rpc/server_options.h"

namespace baton::cli {
namespace {

constexpr auto kStartTimeout = std::chrono::seconds(120);

struct Member {
  std::string name;  // "router", "prefill[0]", ...
  std::unique_ptr<ChildProcess> process;
  std::string address;
};

std::vector<std::string> WorkerArgs(const std::string& self, const std::string& subcommand,
                                    const ClusterConfig& c, const ProcessConfig& p,
                                    const std::string& router) {
  std::vector<std::string> argv = {self, subcommand, "--host", c.host,
                                   "--port", std::to_string(p.port), "--router", router};
  if (!c.model.empty()) argv.insert(argv.end(), {"--model", c.model});
  if (!c.token.empty()) argv.insert(argv.end(), {"--token", c.token});
  if (p.threads > 0) argv.insert(argv.end(), {"--threads", std::to_string(p.threads)});
  if (!p.kv_cache_memory.empty()) argv.insert(argv.end(), {"--kv-cache-memory", p.kv_cache_memory});
  argv.insert(argv.end(), p.extra_args.begin(), p.extra_args.end());
  return argv;
}

absl::Status StartMember(Member& m, const std::vector<std::string>& argv,
                         const std::vector<int>& cpus) {
  absl::StatusOr<std::unique_ptr<ChildProcess>> process = ChildProcess::Start(argv, cpus);
  if (!process.ok()) return process.status();
  m.process = std::move(*process);
  absl::StatusOr<std::string> address = m.process->WaitForLine("listening on ", kStartTimeout);
  if (!address.ok()) {
    return absl::UnavailableError(
        absl::StrCat(m.name, " did not start: ", address.status().message()));
  }
  m.address = *address;
  std::cerr << "baton up: " << m.name << " listening on " << m.address << "\n";
  return absl::OkStatus();
}

// Waits until the router reports `n_workers` healthy workers.
absl::Status WaitHealthy(const std::string& router, const std::string& token, size_t n_workers) {
  rpc::ClientOptions client{.auth_token = token};
  absl::StatusOr<std::shared_ptr<grpc::Channel>> channel = rpc::MakeChannel(router, client);
  if (!channel.ok()) return channel.status();
  auto stub = baton::v1::Router::NewStub(*channel);
  const auto deadline = std::chrono::steady_clock::now() + kStartTimeout;
  while (std::chrono::steady_clock::now() < deadline) {
    grpc::ClientContext context;
    rpc::PrepareContext(context, client, std::chrono::system_clock::now() + std::chrono::seconds(2));
    baton::v1::ClusterStatusResponse status;
    if (stub->ClusterStatus(&context, {}, &status).ok()) {
      size_t healthy = 0;
      for (const auto& w : status.workers()) healthy += w.healthy();
      if (healthy >= n_workers) return absl::OkStatus();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return absl::DeadlineExceededError("the workers did not all register with the router in time");
}

void StopAll(std::vector<Member>& members) {
  // The router first (no new requests), then the workers; SIGKILL whatever outlives its grace.
  for (size_t i = 0; i < members.size(); ++i) {
    Member& m = members[i];
    if (!m.process) continue;
    m.process->Signal(SIGTERM);
    if (i == 0) (void)m.process->Wait(std::chrono::seconds(10));
  }
  for (Member& m : members) {
    if (m.process && !m.process->Wait(std::chrono::seconds(10)).ok()) m.process->Signal(SIGKILL);
  }
}

std::string DefaultConfigPath() {
  std::filesystem::path candidate = std::filesystem::path(SelfExecutable()).parent_path() /
                                    "../../deploy/local/cluster.yaml";
  std::error_code ec;
  return std::filesystem::exists(candidate, ec) ? candidate.lexically_normal().string() : "";
}

}  // namespace

int RunUp(const Args& args) {
  const std::vector<FlagSpec> specs = {
      {"config", "FILE", "cluster YAML (default: deploy/local/cluster.yaml: 1 prefill + 1 decode)"},
      {"model", "PATH", "model for every process (overrides the file's)"},
      {"help", "", "show this help"},
  };
  const std::string usage = Usage("up", "[--config FILE] [--model PATH]", specs);
  absl::StatusOr<Flags> flags = Flags::Parse(args, specs);
  if (!flags.ok()) return UsageError("up", flags.status(), usage);
  if (flags->Has("help")) {
    std::cout << usage;
    return 0;
  }
  const std::string config_path = flags->GetOr("config", DefaultConfigPath());
  absl::StatusOr<ClusterConfig> config =
      config_path.empty() ? DefaultClusterConfig() : LoadClusterConfig(config_path);
  if (!config.ok()) return RunError("up", config.status());
  if (auto model = flags->Get("model")) config->model = *model;
  if (config->model.empty()) config->model = DefaultModelPath();

  BlockShutdownSignals();
  const std::string self = SelfExecutable();
  std::vector<Member> members;
  members.push_back({.name = "router"});
  std::vector<std::string> router_argv = {self, "router", "--host", config->host, "--port",
                                          std::to_string(config->router.port), "--model",
                                          config->model, "--http-host", config->host,
                                          "--http-port", std::to_string(config->router.http_port)};
  if (!config->token.empty()) router_argv.insert(router_argv.end(), {"--token", config->token});
  router_argv.insert(router_argv.end(), config->router.extra_args.begin(),
                     config->router.extra_args.end());
  absl::Status started = StartMember(members[0], router_argv, config->router.cpus);
  const std::string router = members[0].address;
  std::string http;  // the router prints its HTTP address right after its gRPC one
  if (started.ok()) {
    absl::StatusOr<std::string> line =
        members[0].process->WaitForLine("http listening on ", kStartTimeout);
    if (line.ok()) {
      http = *line;
    } else {
      started = absl::UnavailableError(
          absl::StrCat("router did not start its HTTP API: ", line.status().message()));
    }
  }
  auto start_workers = [&](const std::vector<ProcessConfig>& list, const std::string& kind,
                           const std::vector<std::string>& subcommand) {
    for (size_t i = 0; i < list.size() && started.ok(); ++i) {
      Member& m = members.emplace_back(Member{.name = absl::StrCat(kind, "[", i, "]")});
      std::vector<std::string> argv = WorkerArgs(self, subcommand[0], *config, list[i], router);
      argv.insert(argv.begin() + 2, subcommand.begin() + 1, subcommand.end());
      started = StartMember(m, argv, list[i].cpus);
    }
  };
  start_workers(config->prefill, "prefill", {"prefill"});
  start_workers(config->decode, "decode", {"decode"});
  start_workers(config->colocated, "colocated", {"worker", "--role", "both"});
  if (started.ok()) started = WaitHealthy(router, config->token, members.size() - 1);
  if (!started.ok()) {
    StopAll(members);
    return RunError("up", started);
  }
  std::cout << "router: " << router << std::endl;
  std::cout << "http: " << http << std::endl;

  // Serve until a signal, or until a member dies on its own.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  const timespec tick{.tv_sec = 0, .tv_nsec = 200'000'000};
  int exit_code = 0;
  while (true) {
    const int signal = sigtimedwait(&set, nullptr, &tick);
    if (signal > 0) {
      std::cerr << "baton up: signal " << signal << ", draining and stopping the cluster\n";
      break;
    }
    bool died = false;
    for (Member& m : members) {
      absl::StatusOr<int> code = m.process->Wait(std::chrono::milliseconds(0));
      if (code.ok()) {
        std::cerr << "baton up: " << m.name << " exited with code " << *code << "\n";
        died = true;
      }
    }
    if (died) {
      exit_code = 1;
      break;
    }
  }
  StopAll(members);
  return exit_code;
}

}  // namespace baton::cli
