// rpc::StartServer's listening port: a port something already listens on is refused with
// "address in use" (gRPC's default SO_REUSEPORT would let a second server share it silently), and
// the server that holds it keeps serving.
#include "rpc/server_options.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "grpc/reflection/v1/reflection.grpc.pb.h"
#include "gtest/gtest.h"

namespace baton::rpc {
namespace {

namespace refl = grpc::reflection::v1;
using testing::HasSubstr;

ServerOptions OnPort(int port) {
  ServerOptions options;
  options.port = port;
  return options;
}

// Whether the server on `port` answers an RPC (reflection's list_services).
bool Answers(int port) {
  absl::StatusOr<std::shared_ptr<grpc::Channel>> channel =
      MakeChannel(absl::StrCat("127.0.0.1:", port), {});
  if (!channel.ok()) return false;
  std::unique_ptr<refl::ServerReflection::Stub> stub = refl::ServerReflection::NewStub(*channel);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  auto stream = stub->ServerReflectionInfo(&context);
  refl::ServerReflectionRequest request;
  request.set_list_services("*");
  refl::ServerReflectionResponse response;
  const bool answered = stream->Write(request) && stream->Read(&response);
  stream->WritesDone();
  return stream->Finish().ok() && answered && response.has_list_services_response();
}

TEST(StartServerTest, ASecondServerOnAPortInUseFailsAndTheFirstKeepsServing) {
  absl::StatusOr<StartedServer> first = StartServer(OnPort(0), {});
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_GT(first->port, 0);

  absl::StatusOr<StartedServer> second = StartServer(OnPort(first->port), {});
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(second.status().message(),
              HasSubstr(absl::StrCat("cannot listen on 127.0.0.1:", first->port,
                                     ": address in use")));

  EXPECT_TRUE(Answers(first->port));
  first->server->Shutdown(std::chrono::system_clock::now());
}

// The case SO_REUSEPORT would let through: the port's holder allows sharing it.
TEST(StartServerTest, APortHeldBySocketThatAllowsReusePortIsStillRefused) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  const int yes = 1;
  ASSERT_EQ(setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes)), 0);
  ASSERT_EQ(setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &yes, sizeof(yes)), 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = 0;
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
  ASSERT_EQ(listen(fd, 1), 0);
  socklen_t length = sizeof(address);
  ASSERT_EQ(getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length), 0);
  const int port = ntohs(address.sin_port);

  absl::StatusOr<StartedServer> server = StartServer(OnPort(port), {});
  EXPECT_FALSE(server.ok());
  EXPECT_THAT(server.status().message(), HasSubstr("address in use"));
  close(fd);
}

}  // namespace
}  // namespace baton::rpc
