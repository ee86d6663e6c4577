#include "tests/support/http_server_thread.h"

#include <chrono>

namespace baton::test_support {

HttpServerThread::HttpServerThread(httplib::Server* server) : server_(server) {
  port_ = server_->bind_to_any_port("127.0.0.1");
  thread_ = std::thread([this] { server_->listen_after_bind(); });
  // stop() is a no-op until the accept loop runs: wait for it (bounded) so the destructor ends.
  for (int i = 0; i < 10000 && !server_->is_running(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

HttpServerThread::~HttpServerThread() {
  server_->stop();
  thread_.join();
}

}  // namespace baton::test_support
