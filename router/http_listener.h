// The accepting side of the router's event-driven HTTP server: listens with the configured
// backlog, accepts asynchronously on an io_context, and gives each connection a strand of its own
// (router/http_connection.h). It bounds the connections open at once, in all and per client IP
// address; past either bound a new connection gets 503 (the application's Refusal, code
// "too_many_connections", Connection: close) at once, so a flood of slow clients costs the others
// nothing but their own slots.
//
// Thread-safety: Listen() then Accept() once; port() from any thread after Listen();
// StopAccepting(), AbortAll(), connections() and WaitForNoConnections() from any thread that does
// not run the io_context. The listener must be destroyed before the io_context; connections may
// outlive it.
#ifndef BATON_ROUTER_HTTP_LISTENER_H_
#define BATON_ROUTER_HTTP_LISTENER_H_

#include <memory>
#include <string>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "router/http_connection.h"

namespace baton::router {

struct HttpListenerOptions {
  std::string host = "127.0.0.1";
  int port = 0;  // 0: any free port
  int backlog = 1024;
  int max_connections = 512;
  int max_connections_per_client = 64;  // per remote IP address
};

class HttpListener {
 public:
  // `io` and `app` must outlive the listener.
  HttpListener(boost::asio::io_context& io, HttpListenerOptions options,
               HttpConnectionOptions connection_options, HttpApplication* app);
  ~HttpListener();
  HttpListener(const HttpListener&) = delete;
  HttpListener& operator=(const HttpListener&) = delete;

  // Binds and listens. UNAVAILABLE when the address cannot be resolved or bound.
  absl::Status Listen();
  // Starts accepting (on the io_context's threads).
  void Accept();
  int port() const { return port_; }

  // Closes the listening socket (new connections are refused by the OS) and waits until it is.
  void StopAccepting();
  // Closes every open connection at once.
  void AbortAll();
  int connections() const;
  // True once no connection is open; false at `deadline`.
  bool WaitForNoConnections(absl::Time deadline);

 private:
  class Registry;

  void AcceptNext();
  void OnAccept(boost::system::error_code ec, boost::asio::ip::tcp::socket socket);

  boost::asio::io_context& io_;
  const HttpListenerOptions options_;
  const HttpConnectionOptions connection_options_;
  HttpApplication* const app_;
  boost::asio::strand<boost::asio::io_context::executor_type> strand_;
  boost::asio::ip::tcp::acceptor acceptor_;  // used on strand_
  boost::asio::steady_timer retry_timer_;    // after an accept error (out of descriptors)
  int port_ = 0;
  // Shared with the connections: each leaves it in its destructor, which may run after the
  // listener's.
  std::shared_ptr<Registry> registry_;
};

}  // namespace baton::router

#endif  // BATON_ROUTER_HTTP_LISTENER_H_
