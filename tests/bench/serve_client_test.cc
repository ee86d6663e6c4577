#include "bench/serve_client.h"

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "httplib.h"
#include "tests/support/http_server_thread.h"

namespace baton::bench {
namespace {

// A stand-in router on 127.0.0.1: answers every streamed completion with one token chunk and a
// usage chunk, and counts the completions it was sent.
class CountingRouter {
 public:
  CountingRouter() {
    server_.Post("/v1/completions", [this](const httplib::Request&, httplib::Response& response) {
      ++completions_;
      response.set_content(
          "data: {\"choices\": [{\"index\": 0, \"text\": \"x\"}]}\n\n"
          "data: {\"choices\": [], \"usage\": {\"prompt_tokens\": 1, \"completion_tokens\": 1}}\n\n"
          "data: [DONE]\n\n",
          "text/event-stream");
    });
    serving_ = std::make_unique<test_support::HttpServerThread>(&server_);
  }

  std::string address() const { return serving_->address(); }
  int completions() const { return completions_.load(); }

 private:
  httplib::Server server_;
  std::atomic<int> completions_{0};
  std::unique_ptr<test_support::HttpServerThread> serving_;  // last: stops first
};

TEST(ServeClientTest, RequestsGoToEachListedRouterInTurn) {
  CountingRouter a, b;
  ServeClientOptions options;
  options.protocol = ServeProtocol::kHttp;
  options.server = absl::StrCat(a.address(), ",", b.address());
  absl::StatusOr<std::unique_ptr<ServeClient>> client = CreateServeClient(options);
  ASSERT_TRUE(client.ok()) << client.status();

  for (int i = 0; i < 5; ++i) {
    const RequestOutcome outcome = (*client)->Send(ServeRequest{.prompt = "hi", .max_tokens = 1});
    EXPECT_TRUE(outcome.ok) << outcome.error << ": " << outcome.error_message;
  }
  EXPECT_EQ(a.completions(), 3);
  EXPECT_EQ(b.completions(), 2);
}

TEST(ServeClientTest, OneMalformedAddressInTheListIsRefusedByName) {
  ServeClientOptions options;
  options.server = "127.0.0.1:7000,router-without-port";
  absl::StatusOr<std::unique_ptr<ServeClient>> client = CreateServeClient(options);
  EXPECT_EQ(client.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(client.status().message(), testing::HasSubstr("'router-without-port'"));
}

}  // namespace
}  // namespace baton::bench
