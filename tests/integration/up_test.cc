// `baton up` as an operator meets it, with real processes: it announces the router, the HTTP API
// and every worker's metrics address; the cluster token never appears on a command line; the
// router logs one timestamped line per request; members that die are restarted; with `link:`
// the prefill and decode side run in network namespaces joined by the emulated link, removed on
// exit; and a second router on ports in use fails to start instead of sharing them.
#include <signal.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "cli/child_process.h"
#include "cli/network_namespaces.h"
#include "engine/synthetic_model.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/integration/local_cluster.h"
#include "tests/support/temp_path.h"

namespace baton {
namespace {

using ::testing::HasSubstr;

constexpr char kToken[] = "up-test-token-8d1f";

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// `command_line` under /bin/sh with stderr to `stderr_path`.
absl::StatusOr<std::unique_ptr<cli::ChildProcess>> StartWithStderr(
    const std::string& command_line, const std::string& stderr_path) {
  return cli::ChildProcess::Start(
      {"/bin/sh", "-c", "exec " + command_line + " 2>" + stderr_path});
}

// Whether any process's command line contains `needle`.
bool AnyCommandLineContains(const std::string& needle) {
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    std::string cmdline = ReadFile(entry.path().string() + "/cmdline");
    for (char& c : cmdline) {
      if (c == '\0') c = ' ';
    }
    if (cmdline.find(needle) != std::string::npos) return true;
  }
  return false;
}

TEST(UpTest, AnnouncesMetricsHidesTheTokenAndLogsEachRequest) {
  const std::string dir = test_support::TempPath("up-test");
  std::filesystem::create_directories(dir);
  const std::string model = dir + "/model.gguf";
  ASSERT_TRUE(engine::WriteSyntheticModel(model, {.seed = 3}).ok());
  const std::string config = dir + "/cluster.yaml";
  std::ofstream(config) << "host: 127.0.0.1\nmodel: " << model << "\ntoken: " << kToken
                        << "\nrouter:\n  port: 0\nprefill:\n  - threads: 1\n"
                        << "decode:\n  - threads: 1\n    kv_cache_memory: 16M\n";
  const std::string log = dir + "/up.log";
  absl::StatusOr<std::unique_ptr<cli::ChildProcess>> up = StartWithStderr(
      test_support::BatonBinary() + " up --config " + config + " --log-level info", log);
  ASSERT_TRUE(up.ok()) << up.status();
  const auto timeout = std::chrono::seconds(120);
  absl::StatusOr<std::string> router = (*up)->WaitForLine("router: ", timeout);
  ASSERT_TRUE(router.ok()) << router.status() << "\n" << ReadFile(log);
  ASSERT_TRUE((*up)->WaitForLine("http: ", timeout).ok());
  const std::regex host_port(R"(127\.0\.0\.1:[0-9]+)");
  for (const char* worker : {"metrics prefill[0]: ", "metrics decode[0]: "}) {
    absl::StatusOr<std::string> metrics = (*up)->WaitForLine(worker, timeout);
    ASSERT_TRUE(metrics.ok()) << worker << metrics.status();
    EXPECT_TRUE(std::regex_match(*metrics, host_port)) << *metrics;
  }
  EXPECT_FALSE(AnyCommandLineContains(kToken)) << "the token is on a command line";

  absl::StatusOr<std::shared_ptr<grpc::Channel>> channel =
      rpc::MakeChannel(*router, {.auth_token = kToken});
  ASSERT_TRUE(channel.ok());
  auto stub = v1::Router::NewStub(*channel);
  grpc::ClientContext context;
  rpc::PrepareContext(context, {.auth_token = kToken},
                      std::chrono::system_clock::now() + std::chrono::seconds(60));
  v1::GenerateRequest request;
  request.set_request_id("up-test-request");
  request.mutable_prompt_tokens()->add_ids(1);
  request.mutable_prompt_tokens()->add_ids(2);
  request.mutable_sampling()->set_max_tokens(3);
  request.mutable_sampling()->set_ignore_eos(true);
  const test_support::GenerateOutcome outcome = test_support::RunGenerate(*stub, context, request);
  ASSERT_TRUE(outcome.status.ok()) << outcome.status.error_message();

  (*up)->Signal(SIGTERM);
  absl::StatusOr<int> code = (*up)->Wait(std::chrono::seconds(60));
  ASSERT_TRUE(code.ok());
  EXPECT_EQ(*code, 0);
  const std::string lines = ReadFile(log);
  const std::regex request_line(
      R"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z I router\[\d+\] request up-test-request length: )"
      R"(prompt 2 tokens, generated 3, ttft [0-9.]+ ms, e2e [0-9.]+ ms, prefill 127\.0\.0\.1:\d+, )"
      R"(decode 127\.0\.0\.1:\d+)");
  std::smatch match;
  EXPECT_TRUE(std::regex_search(lines, match, request_line)) << lines;
}

// Generate through `router` with `token`; the call's status.
grpc::Status GenerateWithToken(const std::string& router, const std::string& token) {
  absl::StatusOr<std::shared_ptr<grpc::Channel>> channel =
      rpc::MakeChannel(router, {.auth_token = token});
  if (!channel.ok()) return grpc::Status(grpc::StatusCode::INTERNAL, "no channel");
  auto stub = v1::Router::NewStub(*channel);
  grpc::ClientContext context;
  rpc::PrepareContext(context, {.auth_token = token},
                      std::chrono::system_clock::now() + std::chrono::seconds(60));
  v1::GenerateRequest request;
  request.mutable_prompt_tokens()->add_ids(1);
  request.mutable_sampling()->set_max_tokens(2);
  return test_support::RunGenerate(*stub, context, request).status;
}

TEST(UpTest, TokenFileKeyGuardsTheCluster) {
  const std::string dir = test_support::TempPath("up-token-file");
  std::filesystem::create_directories(dir);
  const std::string model = dir + "/model.gguf";
  ASSERT_TRUE(engine::WriteSyntheticModel(model, {.seed = 3}).ok());
  const std::string token_file = dir + "/token";
  std::ofstream(token_file) << kToken << "\n";
  const std::string config = dir + "/cluster.yaml";
  std::ofstream(config) << "model: " << model << "\ntoken_file: " << token_file
                        << "\nprefill:\n  - threads: 1\ndecode:\n  - threads: 1\n"
                        << "    kv_cache_memory: 16M\n";
  absl::StatusOr<std::unique_ptr<cli::ChildProcess>> up = StartWithStderr(
      test_support::BatonBinary() + " up --config " + config, dir + "/up.log");
  ASSERT_TRUE(up.ok()) << up.status();
  absl::StatusOr<std::string> router = (*up)->WaitForLine("router: ", std::chrono::seconds(120));
  ASSERT_TRUE(router.ok()) << router.status() << "\n" << ReadFile(dir + "/up.log");
  EXPECT_TRUE(GenerateWithToken(*router, kToken).ok());
  EXPECT_EQ(GenerateWithToken(*router, "").error_code(), grpc::StatusCode::UNAUTHENTICATED);
  (*up)->Signal(SIGTERM);
  absl::StatusOr<int> code = (*up)->Wait(std::chrono::seconds(60));
  ASSERT_TRUE(code.ok());
  EXPECT_EQ(*code, 0);
}

// The pid in the last "NAME (pid N) listening on" line of `log`; 0 when there is none.
int LastPidOf(const std::string& log, const std::string& name) {
  const std::regex line(std::regex_replace(name, std::regex(R"([\[\]])"), R"(\$&)") +
                        R"( \(pid (\d+)\) listening on)");
  int pid = 0;
  for (std::sregex_iterator it(log.begin(), log.end(), line), end; it != end; ++it) {
    pid = std::stoi((*it)[1]);
  }
  return pid;
}

// `baton up` of a synthetic model with one prefill and one decode worker, the cluster file's
// other keys in `extra_yaml`; its process, the router's address and the path of its log.
struct SmallCluster {
  std::unique_ptr<cli::ChildProcess> up;
  std::string router;
  std::string log;
};
absl::StatusOr<SmallCluster> StartSmallCluster(const std::string& name,
                                               const std::string& extra_yaml = "") {
  const std::string dir = test_support::TempPath(name);
  std::filesystem::create_directories(dir);
  const std::string model = dir + "/model.gguf";
  if (absl::Status s = engine::WriteSyntheticModel(model, {.seed = 3}); !s.ok()) return s;
  const std::string config = dir + "/cluster.yaml";
  std::ofstream(config) << "model: " << model << "\n" << extra_yaml
                        << "prefill:\n  - threads: 1\n"
                        << "decode:\n  - threads: 1\n    kv_cache_memory: 16M\n";
  SmallCluster c{.log = dir + "/up.log"};
  absl::StatusOr<std::unique_ptr<cli::ChildProcess>> up =
      StartWithStderr(test_support::BatonBinary() + " up --config " + config, c.log);
  if (!up.ok()) return up.status();
  c.up = *std::move(up);
  absl::StatusOr<std::string> router = c.up->WaitForLine("router: ", std::chrono::seconds(120));
  if (!router.ok()) {
    return absl::Status(router.status().code(),
                        absl::StrCat(router.status().message(), "\n", ReadFile(c.log)));
  }
  c.router = *router;
  return c;
}

// Whether a request through `router` succeeds within about 30 s (members may be starting).
bool ServesSoon(const std::string& router) {
  for (int i = 0; i < 60; ++i) {
    if (GenerateWithToken(router, "").ok()) return true;
    usleep(500'000);
  }
  return false;
}

TEST(UpTest, DeadMembersAreRestartedAndTheClusterServesAgain) {
  absl::StatusOr<SmallCluster> cluster = StartSmallCluster("up-restart");
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  cli::ChildProcess* up = cluster->up.get();
  const std::string& router = cluster->router;
  const std::string& log = cluster->log;
  const int first = LastPidOf(ReadFile(log), "decode[0]");
  ASSERT_GT(first, 0) << ReadFile(log);
  ASSERT_EQ(kill(first, SIGKILL), 0);
  // Bounded waits: the restart shows in the log, then a request goes through again.
  int second = first;
  for (int i = 0; i < 600 && (second == first || second == 0); ++i) {
    usleep(100'000);
    second = LastPidOf(ReadFile(log), "decode[0]");
  }
  EXPECT_NE(second, first) << ReadFile(log);
  EXPECT_THAT(ReadFile(log), HasSubstr("decode[0] exited with code 137; restarting it (1 of 5) in 100ms"));
  EXPECT_TRUE(ServesSoon(router)) << ReadFile(log);
  // The router too: it comes back on the same address and the workers register with it again.
  const int router_pid = LastPidOf(ReadFile(log), "router");
  ASSERT_GT(router_pid, 0);
  ASSERT_EQ(kill(router_pid, SIGKILL), 0);
  bool served = false;
  for (int i = 0; i < 120 && !served; ++i) {
    usleep(500'000);
    served = LastPidOf(ReadFile(log), "router") != router_pid &&
             GenerateWithToken(router, "").ok();
  }
  EXPECT_TRUE(served) << ReadFile(log);
  up->Signal(SIGTERM);
  absl::StatusOr<int> code = up->Wait(std::chrono::seconds(60));
  ASSERT_TRUE(code.ok());
  EXPECT_EQ(*code, 0);
}

// `replicas: 2`: two routers, announced as router:/http: and router[1]:/http[1]:, serve the same
// workers; one killed, the other serves at once, and `baton up` brings the killed one back.
TEST(UpTest, RouterReplicasServeTheSameWorkers) {
  absl::StatusOr<SmallCluster> cluster =
      StartSmallCluster("up-replicas", "router:\n  replicas: 2\n");
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  cli::ChildProcess* up = cluster->up.get();
  const auto timeout = std::chrono::seconds(60);
  ASSERT_TRUE(up->WaitForLine("http: ", timeout).ok());
  absl::StatusOr<std::string> second = up->WaitForLine("router[1]: ", timeout);
  ASSERT_TRUE(second.ok()) << second.status() << ReadFile(cluster->log);
  ASSERT_TRUE(up->WaitForLine("http[1]: ", timeout).ok());
  EXPECT_NE(*second, cluster->router);
  EXPECT_TRUE(GenerateWithToken(cluster->router, "").ok());
  EXPECT_TRUE(GenerateWithToken(*second, "").ok());

  const int pid = LastPidOf(ReadFile(cluster->log), "router[1]");
  ASSERT_GT(pid, 0) << ReadFile(cluster->log);
  ASSERT_EQ(kill(pid, SIGKILL), 0);
  EXPECT_TRUE(GenerateWithToken(cluster->router, "").ok());
  EXPECT_TRUE(ServesSoon(*second)) << ReadFile(cluster->log);
  EXPECT_NE(LastPidOf(ReadFile(cluster->log), "router[1]"), pid);
  up->Signal(SIGTERM);
  absl::StatusOr<int> code = up->Wait(std::chrono::seconds(60));
  ASSERT_TRUE(code.ok());
  EXPECT_EQ(*code, 0);
}

// Network namespaces `baton` made for the process `pid` (cli/network_namespaces.h's names).
std::vector<std::string> NamespacesOf(int pid) {
  std::vector<std::string> found;
  FILE* list = popen("ip netns list 2>/dev/null", "r");
  if (list == nullptr) return found;
  char line[512];
  const std::string prefix = "baton-" + std::to_string(pid) + "-";
  while (fgets(line, sizeof(line), list) != nullptr) {
    if (std::string(line).rfind(prefix, 0) == 0) found.emplace_back(line);
  }
  pclose(list);
  return found;
}

TEST(UpTest, LinkPutsPrefillAndDecodeInNamespacesJoinedByIt) {
  if (absl::Status s = cli::NetworkNamespacesAvailable(); !s.ok()) {
    GTEST_SKIP() << "network namespaces cannot be made here: " << s.message();
  }
  absl::StatusOr<SmallCluster> cluster = StartSmallCluster("up-link", "link: 1gbit\n");
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  cli::ChildProcess* up = cluster->up.get();
  const std::string& log = cluster->log;
  EXPECT_EQ(NamespacesOf(up->pid()).size(), 2u) << ReadFile(log);
  EXPECT_TRUE(ServesSoon(cluster->router)) << ReadFile(log);
  // The request's KV crossed the link: its decode worker is the one inside the decode namespace.
  EXPECT_THAT(ReadFile(log), HasSubstr(absl::StrCat(
                                 ":", cli::PdNamespaces::kFirstDecodePort)));
  up->Signal(SIGTERM);
  absl::StatusOr<int> code = up->Wait(std::chrono::seconds(60));
  ASSERT_TRUE(code.ok());
  EXPECT_EQ(*code, 0);
  EXPECT_TRUE(NamespacesOf(up->pid()).empty()) << "namespaces left behind";
}

TEST(UpTest, ASecondRouterOnPortsInUseFailsToStart) {
  const std::string dir = test_support::TempPath("port-in-use");
  std::filesystem::create_directories(dir);
  const std::string model = dir + "/model.gguf";
  ASSERT_TRUE(engine::WriteSyntheticModel(model, {.seed = 3}).ok());
  absl::StatusOr<std::unique_ptr<cli::ChildProcess>> first = StartWithStderr(
      test_support::BatonBinary() + " router --model " + model, dir + "/first.log");
  ASSERT_TRUE(first.ok());
  absl::StatusOr<std::string> address =
      (*first)->WaitForLine("listening on ", std::chrono::seconds(60));
  ASSERT_TRUE(address.ok()) << address.status();
  const std::string port = address->substr(address->rfind(':') + 1);
  absl::StatusOr<std::unique_ptr<cli::ChildProcess>> second = StartWithStderr(
      test_support::BatonBinary() + " router --model " + model + " --port " + port,
      dir + "/second.log");
  ASSERT_TRUE(second.ok());
  absl::StatusOr<int> code = (*second)->Wait(std::chrono::seconds(60));
  ASSERT_TRUE(code.ok()) << "the second router is still running";
  EXPECT_NE(*code, 0);
  EXPECT_THAT(ReadFile(dir + "/second.log"), HasSubstr("address in use"));
  (*first)->Signal(SIGTERM);
  EXPECT_TRUE((*first)->Wait(std::chrono::seconds(30)).ok());
}

}  // namespace
}  // namespace baton
