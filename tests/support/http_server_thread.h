// An httplib server (plain or TLS) serving on 127.0.0.1, on a free port, on a thread of its own:
// for stand-ins of HTTP services in tests.
//
// Thread-safety: construct and destroy on one thread; port() from any.
#ifndef BATON_TESTS_SUPPORT_HTTP_SERVER_THREAD_H_
#define BATON_TESTS_SUPPORT_HTTP_SERVER_THREAD_H_

#include <string>
#include <thread>

#include "httplib.h"

namespace baton::test_support {

class HttpServerThread {
 public:
  // Binds `server` (its handlers set already; it must outlive this) and serves until destroyed.
  // Connections queue from the moment this returns; the accept loop runs too.
  explicit HttpServerThread(httplib::Server* server);
  ~HttpServerThread();  // stops the server and joins its thread
  HttpServerThread(const HttpServerThread&) = delete;
  HttpServerThread& operator=(const HttpServerThread&) = delete;

  int port() const { return port_; }
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }

 private:
  httplib::Server* const server_;
  int port_ = 0;
  std::thread thread_;
};

}  // namespace baton::test_support

#endif  // BATON_TESTS_SUPPORT_HTTP_SERVER_THREAD_H_
