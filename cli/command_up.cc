// baton up [--config FILE]: a local cluster — the router (or the file's `replicas:` routers, each
// of which every worker reports to) and its workers as processes — healthy and announced on
// stdout ("router: HOST:PORT", then the OpenAI-compatible HTTP API's "http: HOST:PORT", then
// "router[i]: ..." and "http[i]: ..." for each further replica, then one "metrics NAME:
// HOST:PORT" line per worker), until SIGINT/SIGTERM drains and stops it. A member that dies is
// started again on the same ports (at most kMaxRestarts times each; past that the cluster stops).
// The cluster token reaches the children in a file readable only by this user (--token-file),
// never on a command line; every process logs to the shared stderr, one
// whole line at a time (base/log.h). With a link (--link or the file's `link:`), the prefill and
// colocated workers run in one network namespace and the decode workers in another, the KV
// hand-off crossing an emulated link between them (cli/network_namespaces.h); the router stays in
// this namespace and its HTTP API on the file's host.
#include <signal.h>

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/log.h"
#include "baton/v1/router.grpc.pb.h"
#include "cli/child_process.h"
#include "cli/cluster_config.h"
#include "cli/command.h"
#include "cli/link_spec.h"
#include "cli/network_namespaces.h"
#include "cli/serve_flags.h"
#include "rpc/server_options.h"

namespace baton::cli {
namespace {

constexpr auto kStartTimeout = std::chrono::seconds(120);

constexpr int kMaxRestarts = 5;  // per member; past it the cluster stops


struct Member {
  std::string name;  // "router", "router[1]", "prefill[0]", ...
  bool router = false;
  std::vector<std::string> argv;  // its ports pinned to the first ones it bound (restarts keep them)
  std::vector<int> cpus;
  std::unique_ptr<ChildProcess> process;
  std::string address;
  std::string metrics_address;  // workers: their Prometheus endpoint
  std::string http_address;     // routers: their OpenAI-compatible HTTP API
  int restarts = 0;
};

// Sets the value after `flag` in `argv`, when the flag is there.
void PinFlag(std::vector<std::string>& argv, const std::string& flag, const std::string& value) {
  auto it = std::find(argv.begin(), argv.end(), flag);
  if (it != argv.end() && it + 1 != argv.end()) *(it + 1) = value;
}

std::string PortOf(const std::string& address) { return address.substr(address.rfind(':') + 1); }

// What every child gets: the token file and the log level.
struct CommonArgs {
  std::string token_file;  // empty: no token
  std::string log_level;
};

void AddCommonArgs(const CommonArgs& common, std::vector<std::string>& argv) {
  if (!common.token_file.empty()) argv.insert(argv.end(), {"--token-file", common.token_file});
  argv.insert(argv.end(), {"--log-level", common.log_level});
}

std::vector<std::string> WorkerArgs(const std::string& self, const std::string& subcommand,
                                    const ClusterConfig& c, const ProcessConfig& p,
                                    const std::string& router, const CommonArgs& common) {
  std::vector<std::string> argv = {self, subcommand, "--host", c.host,
                                   "--port", std::to_string(p.port), "--router", router};
  if (!c.model.empty()) argv.insert(argv.end(), {"--model", c.model});
  if (!c.quantize.empty()) argv.insert(argv.end(), {"--quantize", c.quantize});
  AddCommonArgs(common, argv);
  // Every worker serves its metrics (on any free port unless the file names one).
  if (std::find(p.extra_args.begin(), p.extra_args.end(), "--metrics-port") == p.extra_args.end()) {
    argv.insert(argv.end(), {"--metrics-port", "0", "--metrics-host", c.host});
  }
  if (p.threads > 0) argv.insert(argv.end(), {"--threads", std::to_string(p.threads)});
  if (p.tensor_parallel > 1) {
    argv.insert(argv.end(), {"--tensor-parallel", std::to_string(p.tensor_parallel)});
  }
  if (!p.device.empty()) argv.insert(argv.end(), {"--device", p.device});
  if (!p.kv_cache_memory.empty()) argv.insert(argv.end(), {"--kv-cache-memory", p.kv_cache_memory});
  argv.insert(argv.end(), p.extra_args.begin(), p.extra_args.end());
  return argv;
}

// Moves a worker's command line into a namespace of `n`: decode workers listen on 0.0.0.0 there
// (port `decode_port`, which they advertise on the decode side's address), the others on the
// prefill side's address; metrics on the side's address.
void PlaceInNamespace(const PdNamespaces& n, bool decode, int decode_port,
                      std::vector<std::string>& argv) {
  const std::string side_host = decode ? n.decode_host() : n.prefill_host();
  PinFlag(argv, "--host", decode ? "0.0.0.0" : side_host);
  PinFlag(argv, "--metrics-host", side_host);
  if (decode) {
    PinFlag(argv, "--port", std::to_string(decode_port));
    argv.insert(argv.end(), {"--advertise", absl::StrCat(side_host, ":", decode_port)});
  }
  std::vector<std::string> prefix =
      PdNamespaces::ExecPrefix(decode ? n.decode_namespace() : n.prefill_namespace());
  argv.insert(argv.begin(), prefix.begin(), prefix.end());
}

absl::Status StartMember(Member& m) {
  absl::StatusOr<std::unique_ptr<ChildProcess>> process = ChildProcess::Start(m.argv, m.cpus);
  if (!process.ok()) return process.status();
  m.process = std::move(*process);
  absl::StatusOr<std::string> address = m.process->WaitForLine("listening on ", kStartTimeout);
  if (!address.ok()) {
    return absl::UnavailableError(
        absl::StrCat(m.name, " did not start: ", address.status().message()));
  }
  m.address = *address;
  PinFlag(m.argv, "--port", PortOf(m.address));
  BATON_LOG(INFO) << m.name << " (pid " << m.process->pid() << ") listening on " << m.address;
  return absl::OkStatus();
}

absl::Status AwaitMetricsAddress(Member& m) {
  absl::StatusOr<std::string> address = m.process->WaitForLine("metrics listening on ",
                                                                kStartTimeout);
  if (!address.ok()) {
    return absl::UnavailableError(
        absl::StrCat(m.name, " did not serve metrics: ", address.status().message()));
  }
  m.metrics_address = *address;
  PinFlag(m.argv, "--metrics-port", PortOf(m.metrics_address));
  return absl::OkStatus();
}

// A router: its gRPC, then its HTTP address.
absl::Status StartRouterMember(Member& m) {
  if (absl::Status s = StartMember(m); !s.ok()) return s;
  absl::StatusOr<std::string> line = m.process->WaitForLine("http listening on ", kStartTimeout);
  if (!line.ok()) {
    return absl::UnavailableError(
        absl::StrCat(m.name, " did not start its HTTP API: ", line.status().message()));
  }
  m.http_address = *line;
  PinFlag(m.argv, "--http-port", PortOf(m.http_address));
  return absl::OkStatus();
}

absl::Status StartWorkerMember(Member& m) {
  if (absl::Status s = StartMember(m); !s.ok()) return s;
  return AwaitMetricsAddress(m);
}

// A member that exited on its own, started again after a backoff with the same command line and
// ports (workers register with the router again; the router serves on the same addresses).
// FAILED_PRECONDITION past kMaxRestarts.
absl::Status Restart(Member& m, int exit_code) {
  if (++m.restarts > kMaxRestarts) {
    return absl::FailedPreconditionError(absl::StrCat(
        m.name, " exited with code ", exit_code, " after ", kMaxRestarts, " restarts"));
  }
  // Back off: 0.1 s before the first restart, doubling with each one after.
  const absl::Duration backoff = absl::Milliseconds(100) * (1 << (m.restarts - 1));
  BATON_LOG(ERROR) << m.name << " exited with code " << exit_code << "; restarting it ("
                   << m.restarts << " of " << kMaxRestarts << ") in "
                   << absl::FormatDuration(backoff);
  absl::SleepFor(backoff);
  return m.router ? StartRouterMember(m) : StartWorkerMember(m);
}

// A file only this user can read holding `token`, for the children's --token-file. Removed by
// the caller.
absl::StatusOr<std::string> WriteTokenFile(const std::string& token) {
  const char* dir = std::getenv("TMPDIR");
  std::string path = absl::StrCat(dir != nullptr && *dir != '\0' ? dir : "/tmp",
                                  "/baton-up-token-XXXXXX");
  const int fd = mkstemp(path.data());  // mode 0600
  if (fd < 0) return absl::InternalError(absl::StrCat("cannot create a token file in ", path));
  const bool written = write(fd, token.data(), token.size()) == static_cast<ssize_t>(token.size());
  close(fd);
  if (!written) {
    unlink(path.c_str());
    return absl::InternalError(absl::StrCat("cannot write the token file ", path));
  }
  return path;
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

// Router replica `r` (0: "router", on the file's ports; others on free ones) on `host`.
Member RouterMember(const std::string& self, const ClusterConfig& config, const CommonArgs& common,
                    const std::string& host, int r) {
  Member m{.name = r == 0 ? std::string("router") : absl::StrCat("router[", r, "]"),
           .router = true,
           .argv = {self, "router", "--host", host, "--port",
                    std::to_string(r == 0 ? config.router.port : 0), "--model", config.model,
                    "--http-host", config.host, "--http-port",
                    std::to_string(r == 0 ? config.router.http_port : 0)},
           .cpus = config.router.cpus};
  AddCommonArgs(common, m.argv);
  if (!config.quantize.empty()) m.argv.insert(m.argv.end(), {"--quantize", config.quantize});
  m.argv.insert(m.argv.end(), config.router.extra_args.begin(), config.router.extra_args.end());
  return m;
}

void StopAll(std::vector<Member>& members) {
  // The routers first (no new requests), then the workers; SIGKILL whatever outlives its grace.
  for (Member& m : members) {
    if (m.process && m.router) m.process->Signal(SIGTERM);
  }
  for (Member& m : members) {
    if (m.process && m.router) (void)m.process->Wait(std::chrono::seconds(10));
  }
  for (Member& m : members) {
    if (m.process && !m.router) m.process->Signal(SIGTERM);
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

// Starts the cluster, serves until a signal or a member's death, stops it; the exit code.
int RunCluster(const ClusterConfig& config, const CommonArgs& common) {
  BlockShutdownSignals();
  const std::string self = SelfExecutable();
  std::unique_ptr<PdNamespaces> namespaces;  // outlives the members (declared before them)
  if (!config.link.empty()) {
    absl::StatusOr<LinkSpec> link = ParseLinkSpec(config.link, "link");
    if (link.ok()) {
      absl::StatusOr<std::unique_ptr<PdNamespaces>> made = PdNamespaces::Create(*link);
      if (!made.ok()) return RunError("up", made.status());
      namespaces = *std::move(made);
    }
    if (!link.ok()) return RunError("up", link.status());
    BATON_LOG(INFO) << "prefill side in namespace " << namespaces->prefill_namespace()
                    << ", decode side in " << namespaces->decode_namespace() << ", link "
                    << config.link;
  }
  // The routers first: replicas serve the same workers, each of which reports to all of them.
  std::vector<Member> members;
  absl::Status started;
  std::string routers;  // the workers' --router
  for (int r = 0; r < config.router.replicas && started.ok(); ++r) {
    Member& m = members.emplace_back(
        RouterMember(self, config, common, namespaces ? namespaces->router_host() : config.host, r));
    started = StartRouterMember(m);
    absl::StrAppend(&routers, r == 0 ? "" : ",", m.address);
  }
  const size_t n_routers = members.size();
  auto start_workers = [&](const std::vector<ProcessConfig>& list, const std::string& kind,
                           const std::vector<std::string>& subcommand) {
    for (size_t i = 0; i < list.size() && started.ok(); ++i) {
      Member& m = members.emplace_back(Member{
          .name = absl::StrCat(kind, "[", i, "]"),
          .argv = WorkerArgs(self, subcommand[0], config, list[i], routers, common),
          .cpus = list[i].cpus});
      m.argv.insert(m.argv.begin() + 2, subcommand.begin() + 1, subcommand.end());
      if (namespaces) {
        const int port = list[i].port != 0 ? list[i].port : PdNamespaces::kFirstDecodePort + static_cast<int>(i);
        PlaceInNamespace(*namespaces, kind == "decode", port, m.argv);
      }
      started = StartWorkerMember(m);
    }
  };
  start_workers(config.prefill, "prefill", {"prefill"});
  start_workers(config.decode, "decode", {"decode"});
  start_workers(config.colocated, "colocated", {"worker", "--role", "both"});
  for (size_t r = 0; r < n_routers && started.ok(); ++r) {
    started = WaitHealthy(members[r].address, config.token, members.size() - n_routers);
  }
  if (!started.ok()) {
    StopAll(members);
    return RunError("up", started);
  }
  std::cout << "router: " << members[0].address << std::endl;
  std::cout << "http: " << members[0].http_address << std::endl;
  for (size_t r = 1; r < n_routers; ++r) {
    std::cout << "router[" << r << "]: " << members[r].address << std::endl;
    std::cout << "http[" << r << "]: " << members[r].http_address << std::endl;
  }
  for (const Member& m : members) {
    if (!m.metrics_address.empty()) {
      std::cout << "metrics " << m.name << ": " << m.metrics_address << std::endl;
    }
  }

  // Serve until a signal, restarting members that die on their own.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  const timespec tick{.tv_sec = 0, .tv_nsec = 200'000'000};
  int exit_code = 0;
  while (true) {
    const int signal = sigtimedwait(&set, nullptr, &tick);
    if (signal > 0) {
      BATON_LOG(INFO) << "signal " << signal << ", draining and stopping the cluster";
      break;
    }
    absl::Status restarted;
    for (Member& m : members) {
      absl::StatusOr<int> code = m.process->Wait(std::chrono::milliseconds(0));
      if (code.ok() && restarted.ok()) restarted = Restart(m, *code);
    }
    if (!restarted.ok()) {
      BATON_LOG(ERROR) << restarted.message() << "; stopping the cluster";
      exit_code = 1;
      break;
    }
  }
  StopAll(members);
  return exit_code;
}

}  // namespace

int RunUp(const Args& args) {
  const std::vector<FlagSpec> specs = {
      {"config", "FILE", "cluster YAML (default: deploy/local/cluster.yaml: 1 prefill + 1 decode)"},
      {"model", "PATH", "model for every process (overrides the file's)"},
      {"quantize", "TYPE", "every process quantizes the checkpoint at load (overrides the file's)"},
      {"log-level", "LEVEL", "debug | info | warning | error, for every process (default info)"},
      {"link", "RATE[,DELAY]", "emulate the prefill <-> decode link (e.g. 10gbit,200us): each side "
                               "in its own network namespace, tc on the link between (root; "
                               "overrides the file's link:)"},
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
  if (auto quantize = flags->Get("quantize")) config->quantize = *quantize;
  if (auto link = flags->Get("link")) {
    if (absl::StatusOr<LinkSpec> spec = ParseLinkSpec(*link, "--link"); !spec.ok()) {
      return UsageError("up", spec.status(), usage);
    }
    config->link = *link;
  }
  if (config->model.empty()) config->model = DefaultModelPath();
  CommonArgs common{.log_level = flags->GetOr("log-level", "info")};
  absl::StatusOr<LogLevel> level = ParseLogLevel(common.log_level);
  if (!level.ok()) return UsageError("up", level.status(), usage);
  SetLogLevel(*level);
  bool wrote_token_file = false;
  if (!config->token_file.empty()) {
    absl::StatusOr<std::string> token = ReadTokenFile(config->token_file);
    if (!token.ok()) return RunError("up", token.status());
    config->token = *std::move(token);
    common.token_file = config->token_file;
  } else if (!config->token.empty()) {
    absl::StatusOr<std::string> token_file = WriteTokenFile(config->token);
    if (!token_file.ok()) return RunError("up", token_file.status());
    common.token_file = *token_file;
    wrote_token_file = true;
  }
  const int exit_code = RunCluster(*config, common);
  if (wrote_token_file) unlink(common.token_file.c_str());
  return exit_code;
}

}  // namespace baton::cli
