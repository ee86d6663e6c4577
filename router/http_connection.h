// One HTTP/1.1 connection of the router's event-driven HTTP server (Boost.Beast over Asio, no
// thread of its own): reads each request with Beast's parser under size and time limits, hands it
// to the HttpApplication once complete, and writes what the application answers, a whole
// response or a chunked stream. Keep-alive and pipelined requests are served one at a time.
//
// Some requests the connection answers itself, with a Refusal() of the application, and then
// closes (after a short linger that reads what the client still sends, so that it sees the
// answer):
//   400  malformed request; Content-Length invalid, negative or given twice with different values
//   408  headers not complete within header_timeout (a silent client is just closed), or the
//        body not within body_timeout after them
//   411  POST/PUT/PATCH with neither Content-Length nor a chunked body
//   413  Content-Length over max_body_bytes (at once, before the body), or a chunked body that
//        grows past it
//   431  headers over max_header_bytes
//
// While the application works on a request the connection keeps reading the socket, so that it
// learns when the client goes away: a reset, or a failed or stuck (write_timeout) write, closes
// the connection and runs the application's on_client_gone. An end of stream alone may be a
// half-close by a client that still waits for the answer, so the connection then probes: until
// the answer starts it writes an interim "100 Continue" response every probe_interval (HTTP/1.1
// only; clients skip interim responses, RFC 9110 15.2), and the write that fails once the client's
// socket is gone tells. The answer then ends the connection.
//
// Thread-safety: every method below runs on the connection's strand (executor()), except Start(),
// StartRefusing() and Abort(), which may be called from any thread.
#ifndef BATON_ROUTER_HTTP_CONNECTION_H_
#define BATON_ROUTER_HTTP_CONNECTION_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/message.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>

#include "absl/functional/any_invocable.h"
#include "absl/time/time.h"

namespace baton::router {

using HttpRequest = boost::beast::http::request<boost::beast::http::string_body>;

struct HttpResponse {
  int status = 200;
  std::string content_type;  // "" -> none
  std::string body;          // ignored by StartStream()
  std::vector<std::pair<std::string, std::string>> headers;  // besides Content-Type, framing
};

// A request the connection answers itself (see the header comment).
struct HttpRefusal {
  int status = 400;
  std::string message;  // for people
  std::string code;     // for programs: "request_too_large", ...
};

struct HttpConnectionOptions {
  size_t max_header_bytes = size_t{16} << 10;
  size_t max_body_bytes = size_t{4} << 20;
  // From the wait for a request (on a kept-alive connection too) to its last header line.
  absl::Duration header_timeout = absl::Seconds(10);
  absl::Duration body_timeout = absl::Seconds(10);  // from the headers to the body's end
  absl::Duration write_timeout = absl::Seconds(30);  // one write to a client that does not read
  absl::Duration probe_interval = absl::Seconds(1);  // after the client's end of stream
  absl::Duration linger = absl::Seconds(2);          // reading after a refusal, before closing
};

class HttpConnection;

// What the server does with requests. Called on the connection's strand.
class HttpApplication {
 public:
  virtual ~HttpApplication() = default;
  // A complete request. The application answers it through the connection (Respond(), or
  // StartStream() ... FinishStream()), now or later, unless the client goes away first.
  virtual void Handle(std::shared_ptr<HttpConnection> connection) = 0;
  // The response to a request the connection refuses itself.
  virtual HttpResponse Refusal(const HttpRefusal& refusal) = 0;
};

class HttpConnection : public std::enable_shared_from_this<HttpConnection> {
 public:
  // `socket` must run its handlers on a strand of its own (accept it with asio::make_strand).
  // `app` must outlive the connection; `on_destroyed` runs in the destructor.
  HttpConnection(boost::asio::ip::tcp::socket socket, const HttpConnectionOptions& options,
                 HttpApplication* app, absl::AnyInvocable<void()> on_destroyed);
  ~HttpConnection();
  HttpConnection(const HttpConnection&) = delete;
  HttpConnection& operator=(const HttpConnection&) = delete;

  // Serves requests until the client closes or a limit is hit. Once.
  void Start();
  // Answers `refusal` without reading a request, then closes. Instead of Start().
  void StartRefusing(HttpRefusal refusal);
  // Closes once the write in flight (if any) is out; the request being answered hears
  // on_client_gone.
  void Abort();

  boost::asio::any_io_executor executor() { return socket_.get_executor(); }

  // The request being answered, from Handle() until the answer is complete.
  HttpRequest& request() { return request_; }

  // The answer: Respond() once, or StartStream() once, WriteChunk() any number of times and
  // FinishStream(). Each does nothing once the client is gone (see gone()).
  void Respond(HttpResponse response);
  void StartStream(HttpResponse head);  // chunked (HTTP/1.0: until the connection closes)
  void WriteChunk(std::string data);
  void FinishStream();

  // Whether written data has not all gone out yet; on_drained runs once it has.
  bool write_pending() const { return writing_ || !pending_.empty(); }
  bool gone() const { return phase_ == Phase::kClosed; }
  // Both are dropped once the answer is complete or the client is gone (on_client_gone runs
  // once, then).
  void set_on_client_gone(absl::AnyInvocable<void()> callback) {
    on_client_gone_ = std::move(callback);
  }
  void set_on_drained(std::function<void()> callback) { on_drained_ = std::move(callback); }

 private:
  enum class Phase {
    kHeader,    // reading a request's headers
    kBody,      // reading its body
    kHandling,  // the application answers it; the socket is watched
    kNext,      // the answer is out; waiting for the watch to stop before the next request
    kRefusing,  // writing a refusal, then lingering
    kLinger,    // shut down for writing; reading what the client still sends
    kClosed,
  };

  void ReadHeader();
  void OnHeader(boost::system::error_code ec);
  void ReadBody();
  void OnBody(boost::system::error_code ec);
  void OnReadError(boost::system::error_code ec);
  void OnRequest();
  void ArmReadTimer(absl::Duration timeout);

  void ReadSome();
  void OnReadSome(boost::system::error_code ec, size_t n);
  void Probe();
  void EndExchange();

  void Refuse(HttpRefusal refusal);
  void Queue(std::string bytes);
  void StartWrite();
  void OnWrite(boost::system::error_code ec);
  void Linger();
  void Close();
  void DropCallbacks();

  boost::asio::ip::tcp::socket socket_;
  const HttpConnectionOptions options_;
  HttpApplication* const app_;
  absl::AnyInvocable<void()> on_destroyed_;

  Phase phase_ = Phase::kHeader;
  boost::beast::flat_buffer buffer_;  // bytes read and not parsed yet
  std::optional<boost::beast::http::request_parser<boost::beast::http::string_body>> parser_;
  HttpRequest request_;
  boost::asio::steady_timer read_timer_;
  uint64_t read_generation_ = 0;  // tells a stale timer expiry from the current read's
  bool read_timed_out_ = false;
  bool reading_some_ = false;     // a ReadSome() is outstanding
  bool peer_eof_ = false;         // the client sent its end of stream
  boost::asio::steady_timer probe_timer_;

  bool keep_alive_ = false;
  bool response_started_ = false;
  bool answered_ = false;  // Respond() or FinishStream() was called
  bool chunked_ = false;

  std::string pending_;  // to write after the write in flight
  std::string writing_buffer_;
  bool writing_ = false;
  bool close_after_write_ = false;  // Abort() came while writing
  boost::asio::steady_timer write_timer_;
  uint64_t write_generation_ = 0;

  absl::AnyInvocable<void()> on_client_gone_;
  std::function<void()> on_drained_;
};

}  // namespace baton::router

#endif  // BATON_ROUTER_HTTP_CONNECTION_H_
