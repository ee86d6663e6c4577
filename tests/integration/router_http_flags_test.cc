// The router's HTTP limits as an operator sets them: with --http-max-connections 1, a second
// connection is answered 503 at once (not left to stall) while the first is held open, and is
// served again once the first has gone.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "cli/child_process.h"
#include "engine/synthetic_model.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/integration/local_cluster.h"
#include "tests/support/temp_path.h"

namespace baton {
namespace {

using ::testing::StartsWith;

// A TCP connection to 127.0.0.1:`port` with a 30 s receive timeout; -1 on failure.
int Connect(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  timeval timeout{.tv_sec = 30, .tv_usec = 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

std::string Exchange(int fd, const std::string& request) {
  send(fd, request.data(), request.size(), MSG_NOSIGNAL);
  std::string answer;
  char buffer[4096];
  while (true) {
    const ssize_t n = recv(fd, buffer, sizeof buffer, 0);
    if (n <= 0) break;
    answer.append(buffer, static_cast<size_t>(n));
    if (answer.find("\r\n\r\n") != std::string::npos) break;
  }
  return answer;
}

TEST(RouterHttpFlagsTest, PastMaxConnectionsANewConnectionGets503) {
  const std::string dir = test_support::TempPath("router-http-flags");
  std::filesystem::create_directories(dir);
  const std::string model = dir + "/model.gguf";
  ASSERT_TRUE(engine::WriteSyntheticModel(model, {.seed = 3}).ok());
  absl::StatusOr<std::unique_ptr<cli::ChildProcess>> router = cli::ChildProcess::Start(
      {test_support::BatonBinary(), "router", "--model", model, "--http-port", "0",
       "--http-max-connections", "1"});
  ASSERT_TRUE(router.ok());
  absl::StatusOr<std::string> http =
      (*router)->WaitForLine("http listening on ", std::chrono::seconds(60));
  ASSERT_TRUE(http.ok()) << http.status();
  const int port = std::stoi(http->substr(http->rfind(':') + 1));
  constexpr char kModels[] = "GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n";
  // The first connection is served and kept alive: it holds the only slot.
  const int held = Connect(port);
  ASSERT_GE(held, 0);
  EXPECT_THAT(Exchange(held, kModels), StartsWith("HTTP/1.1 200 "));
  const int second = Connect(port);
  ASSERT_GE(second, 0);
  EXPECT_THAT(Exchange(second, kModels), StartsWith("HTTP/1.1 503 "));
  close(second);
  // Once the slot is free again, a new connection is served (retried while the server notices
  // the close: up to 20 s, since a loaded 2-core CI machine once took more than 5).
  close(held);
  std::string answer;
  for (int attempt = 0; attempt < 200 && answer.find(" 200 ") == std::string::npos; ++attempt) {
    const int next = Connect(port);
    ASSERT_GE(next, 0);
    answer = Exchange(next, kModels);
    close(next);
    if (answer.find(" 200 ") == std::string::npos) usleep(100'000);
  }
  EXPECT_THAT(answer, StartsWith("HTTP/1.1 200 "));
  (*router)->Signal(SIGTERM);
  EXPECT_TRUE((*router)->Wait(std::chrono::seconds(30)).ok());
}

}  // namespace
}  // namespace baton
