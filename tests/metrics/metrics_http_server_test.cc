// MetricsHttpServer: GET /metrics and /health over real HTTP on 127.0.0.1, fetched with
// httplib::Client.
#include "metrics/metrics_http_server.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "httplib.h"

namespace baton::metrics {
namespace {

using testing::HasSubstr;
using testing::StartsWith;

TEST(MetricsHttpServerTest, ServesMetricsAndHealth) {
  Registry registry;
  registry.GetCounter("baton:test_total", "A test counter.", {{"k", "v"}}).Increment(4);
  registry.GetHistogram("baton:test_seconds", "A test histogram.", {1}).Observe(0.5);
  int collected = 0;
  registry.AddCollector(
      [&] { registry.GetGauge("baton:collected", "Collected.").Set(++collected); });

  absl::StatusOr<std::unique_ptr<MetricsHttpServer>> server =
      MetricsHttpServer::Start({.port = 0, .registry = &registry});
  ASSERT_TRUE(server.ok()) << server.status();
  ASSERT_GT((*server)->port(), 0);
  EXPECT_EQ((*server)->address(), "127.0.0.1:" + std::to_string((*server)->port()));

  httplib::Client client("127.0.0.1", (*server)->port());
  client.set_connection_timeout(5);
  httplib::Result metrics = client.Get("/metrics");
  ASSERT_TRUE(metrics) << httplib::to_string(metrics.error());
  EXPECT_EQ(metrics->status, 200);
  EXPECT_EQ(metrics->get_header_value("Content-Type"), "text/plain; version=0.0.4; charset=utf-8");
  EXPECT_THAT(metrics->body, HasSubstr("# TYPE baton:test_total counter\n"
                                       "baton:test_total{k=\"v\"} 4\n"));
  EXPECT_THAT(metrics->body, HasSubstr("baton:test_seconds_bucket{le=\"+Inf\"} 1\n"));
  EXPECT_THAT(metrics->body, HasSubstr("\nbaton:collected 1\n"));
  // Rendered afresh for every scrape.
  registry.GetCounter("baton:test_total", "A test counter.", {{"k", "v"}}).Increment();
  httplib::Result again = client.Get("/metrics");
  ASSERT_TRUE(again);
  EXPECT_THAT(again->body, HasSubstr("baton:test_total{k=\"v\"} 5\n"));
  EXPECT_THAT(again->body, HasSubstr("\nbaton:collected 2\n"));

  httplib::Result health = client.Get("/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  EXPECT_EQ(health->body, "ok\n");
  EXPECT_THAT(health->get_header_value("Content-Type"), StartsWith("text/plain"));

  httplib::Result missing = client.Get("/nothing");
  ASSERT_TRUE(missing);
  EXPECT_EQ(missing->status, 404);
  httplib::Result post = client.Post("/metrics", "x", "text/plain");
  ASSERT_TRUE(post);
  EXPECT_NE(post->status, 200);

  (*server)->Stop();
  (*server)->Stop();  // idempotent
  httplib::Client after("127.0.0.1", (*server)->port());
  after.set_connection_timeout(1);
  EXPECT_FALSE(after.Get("/health"));
}

TEST(MetricsHttpServerTest, DefaultsToTheGlobalRegistry) {
  Registry::Global().GetCounter("baton:http_server_test_total", "From the test.").Increment();
  absl::StatusOr<std::unique_ptr<MetricsHttpServer>> server = MetricsHttpServer::Start({});
  ASSERT_TRUE(server.ok()) << server.status();
  httplib::Client client("127.0.0.1", (*server)->port());
  httplib::Result metrics = client.Get("/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_THAT(metrics->body, HasSubstr("\nbaton:http_server_test_total 1\n"));
}

TEST(MetricsHttpServerTest, GivenPortAndBusyPort) {
  Registry registry;
  absl::StatusOr<std::unique_ptr<MetricsHttpServer>> first =
      MetricsHttpServer::Start({.port = 0, .registry = &registry});
  ASSERT_TRUE(first.ok()) << first.status();
  const int port = (*first)->port();
  absl::StatusOr<std::unique_ptr<MetricsHttpServer>> second =
      MetricsHttpServer::Start({.port = port, .registry = &registry});
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(second.status().message()), HasSubstr(std::to_string(port)));
  first->reset();  // the destructor stops it and frees the port
  absl::StatusOr<std::unique_ptr<MetricsHttpServer>> third =
      MetricsHttpServer::Start({.port = port, .registry = &registry});
  ASSERT_TRUE(third.ok()) << third.status();
  EXPECT_EQ((*third)->port(), port);
}

TEST(MetricsHttpServerTest, RejectsBadPortsAndHosts) {
  EXPECT_EQ(MetricsHttpServer::Start({.port = -1}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(MetricsHttpServer::Start({.port = 70000}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(MetricsHttpServer::Start({.host = "203.0.113.1"}).status().code(),
            absl::StatusCode::kUnavailable);  // not an address of this machine
}

TEST(MetricsHttpServerTest, StartAndStopManyTimes) {
  Registry registry;
  for (int i = 0; i < 20; ++i) {
    absl::StatusOr<std::unique_ptr<MetricsHttpServer>> server =
        MetricsHttpServer::Start({.registry = &registry});
    ASSERT_TRUE(server.ok()) << server.status();
  }
}

}  // namespace
}  // namespace baton::metrics
