// A tiny HTTP server for processes that have no other HTTP port (the workers): GET /metrics
// renders a metrics registry in the Prometheus text format, GET /health answers "ok". Anything
// else is 404. Started and stopped by its owner; it runs its own threads.
//
//   absl::StatusOr<std::unique_ptr<MetricsHttpServer>> server =
//       MetricsHttpServer::Start({.host = "127.0.0.1", .port = 0});
//   std::cout << "metrics listening on " << (*server)->address() << "\n";
//
// Thread-safety: port() and address() from any thread; Stop() (idempotent, also run by the
// destructor) from the owner.
#ifndef BATON_METRICS_METRICS_HTTP_SERVER_H_
#define BATON_METRICS_METRICS_HTTP_SERVER_H_

#include <atomic>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "metrics/metrics.h"

namespace httplib {
class Server;
}  // namespace httplib

namespace baton::metrics {

struct MetricsHttpServerOptions {
  std::string host = "127.0.0.1";
  int port = 0;                  // 0: any free port
  Registry* registry = nullptr;  // nullptr: Registry::Global(); must outlive the server
  int n_threads = 2;             // connections served at once
};

class MetricsHttpServer {
 public:
  // Binds and starts serving. INVALID_ARGUMENT for a bad port; UNAVAILABLE when the address
  // cannot be bound.
  static absl::StatusOr<std::unique_ptr<MetricsHttpServer>> Start(MetricsHttpServerOptions options);
  ~MetricsHttpServer();
  MetricsHttpServer(const MetricsHttpServer&) = delete;
  MetricsHttpServer& operator=(const MetricsHttpServer&) = delete;

  // The port it listens on (the OS's pick when options.port was 0), and host:port ([host]:port
  // for IPv6).
  int port() const { return port_; }
  std::string address() const;

  // Stops accepting, closes the listening socket and joins the server's threads.
  void Stop();

 private:
  MetricsHttpServer(MetricsHttpServerOptions options, std::unique_ptr<httplib::Server> server);

  const MetricsHttpServerOptions options_;
  std::unique_ptr<httplib::Server> server_;
  int port_ = 0;
  std::thread thread_;
  std::atomic<bool> listen_returned_{false};
};

}  // namespace baton::metrics

#endif  // BATON_METRICS_METRICS_HTTP_SERVER_H_
