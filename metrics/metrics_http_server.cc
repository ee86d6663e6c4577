#include "metrics/metrics_http_server.h"

#include <sys/socket.h>

#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"
#include "httplib.h"

namespace baton::metrics {

MetricsHttpServer::MetricsHttpServer(MetricsHttpServerOptions options,
                                     std::unique_ptr<httplib::Server> server)
    : options_(std::move(options)), server_(std::move(server)) {}

absl::StatusOr<std::unique_ptr<MetricsHttpServer>> MetricsHttpServer::Start(
    MetricsHttpServerOptions options) {
  if (options.port < 0 || options.port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("metrics port ", options.port, " is outside [0, 65535]"));
  }
  if (options.registry == nullptr) options.registry = &Registry::Global();
  if (options.n_threads < 1) options.n_threads = 1;
  auto server = std::make_unique<httplib::Server>();
  Registry* registry = options.registry;
  server->Get("/metrics", [registry](const httplib::Request&, httplib::Response& response) {
    response.set_content(registry->RenderText(), kTextContentType);
  });
  server->Get("/health", [](const httplib::Request&, httplib::Response& response) {
    response.set_content("ok\n", "text/plain; charset=utf-8");
  });
  const size_t n_threads = static_cast<size_t>(options.n_threads);
  server->new_task_queue = [n_threads] { return new httplib::ThreadPool(n_threads); };
  // SO_REUSEADDR only: httplib's default adds SO_REUSEPORT, with which a second server could bind
  // the same port and silently share its connections.
  server->set_socket_options([](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  });
  // Idle keep-alive connections hold a thread; keep them short so that Stop() is quick.
  server->set_keep_alive_timeout(1);
  server->set_read_timeout(5);
  server->set_write_timeout(5);

  int port = options.port;
  if (port == 0) {
    port = server->bind_to_any_port(options.host);
    if (port <= 0) port = -1;
  } else if (!server->bind_to_port(options.host, port)) {
    port = -1;
  }
  if (port < 0) {
    return absl::UnavailableError(
        absl::StrCat("metrics HTTP server cannot listen on ", options.host, ":", options.port));
  }
  std::unique_ptr<MetricsHttpServer> self(
      new MetricsHttpServer(std::move(options), std::move(server)));
  self->port_ = port;
  MetricsHttpServer* raw = self.get();
  self->thread_ = std::thread([raw] {
    raw->server_->listen_after_bind();
    raw->listen_returned_.store(true);
  });
  // stop() is a no-op until the accept loop runs: wait for it, so that Stop() always stops.
  while (!raw->server_->is_running() && !raw->listen_returned_.load()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return self;
}

MetricsHttpServer::~MetricsHttpServer() { Stop(); }

std::string MetricsHttpServer::address() const {
  const std::string& host = options_.host;
  return host.find(':') != std::string::npos ? absl::StrCat("[", host, "]:", port_)
                                             : absl::StrCat(host, ":", port_);
}

void MetricsHttpServer::Stop() {
  if (!thread_.joinable()) return;
  server_->stop();
  thread_.join();
}

}  // namespace baton::metrics
