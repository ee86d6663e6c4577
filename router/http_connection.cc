#include "router/http_connection.h"

#include <sstream>

#include <boost/asio/dispatch.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/string.hpp>
#include <boost/beast/http/empty_body.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/write.hpp>

#include "absl/strings/str_cat.h"

namespace baton::router {
namespace {

namespace asio = boost::asio;
namespace http = boost::beast::http;
using boost::system::error_code;

constexpr char kContinue[] = "HTTP/1.1 100 Continue\r\n\r\n";
constexpr size_t kReadSomeBytes = 4096;

std::chrono::nanoseconds Chrono(absl::Duration d) { return absl::ToChronoNanoseconds(d); }

std::string Seconds(absl::Duration d) { return absl::FormatDuration(d); }

// Methods whose request has a body: without a length it cannot be read.
bool NeedsLength(http::verb method) {
  return method == http::verb::post || method == http::verb::put ||
         method == http::verb::patch;
}

HttpRefusal RefusalFor(error_code ec, const HttpConnectionOptions& options) {
  if (ec == http::error::header_limit) {
    return {431, absl::StrCat("the request headers are larger than the ", options.max_header_bytes,
                              " bytes this server accepts"),
            "headers_too_large"};
  }
  if (ec == http::error::body_limit) {
    return {413, absl::StrCat("the request body is larger than the ", options.max_body_bytes,
                              " bytes this server accepts"),
            "request_too_large"};
  }
  if (ec == http::error::bad_content_length) {
    return {400,
            "the Content-Length header is invalid: not a non-negative number, or given twice "
            "with different values",
            "invalid_content_length"};
  }
  return {400, absl::StrCat("malformed HTTP request: ", ec.message()), "bad_request"};
}

template <class Message>
void SetHeaders(const HttpResponse& response, Message& message) {
  message.set(http::field::server, "baton");
  if (!response.content_type.empty()) {
    message.set(http::field::content_type, response.content_type);
  }
  for (const auto& [name, value] : response.headers) message.set(name, value);
}

std::string Serialize(HttpResponse response, unsigned version, bool keep_alive) {
  http::response<http::string_body> message(static_cast<http::status>(response.status), version);
  SetHeaders(response, message);
  message.body() = std::move(response.body);
  message.keep_alive(keep_alive);
  message.prepare_payload();
  std::ostringstream out;
  out << message;
  return std::move(out).str();
}

std::string SerializeHead(const HttpResponse& head, unsigned version, bool keep_alive,
                          bool chunked) {
  http::response<http::empty_body> message(static_cast<http::status>(head.status), version);
  SetHeaders(head, message);
  message.keep_alive(keep_alive);
  if (chunked) message.chunked(true);
  std::ostringstream out;
  out << message.base();
  return std::move(out).str();
}

}  // namespace

HttpConnection::HttpConnection(asio::ip::tcp::socket socket, const HttpConnectionOptions& options,
                               HttpApplication* app, absl::AnyInvocable<void()> on_destroyed)
    : socket_(std::move(socket)),
      options_(options),
      app_(app),
      on_destroyed_(std::move(on_destroyed)),
      read_timer_(socket_.get_executor()),
      probe_timer_(socket_.get_executor()),
      write_timer_(socket_.get_executor()) {}

HttpConnection::~HttpConnection() {
  if (on_destroyed_ != nullptr) on_destroyed_();
}

void HttpConnection::Start() {
  asio::dispatch(executor(), [self = shared_from_this()] {
    error_code ignored;
    self->socket_.set_option(asio::ip::tcp::no_delay(true), ignored);
    self->ReadHeader();
  });
}

void HttpConnection::StartRefusing(HttpRefusal refusal) {
  asio::dispatch(executor(), [self = shared_from_this(), refusal = std::move(refusal)]() mutable {
    self->Refuse(std::move(refusal));
  });
}

void HttpConnection::Abort() {
  asio::post(executor(), [self = shared_from_this()] {
    if (!self->writing_) return self->Close();
    self->close_after_write_ = true;  // lets an answer already on its way out finish
  });
}

// Reading a request.

void HttpConnection::ReadHeader() {
  phase_ = Phase::kHeader;
  parser_.emplace();
  parser_->header_limit(static_cast<uint32_t>(options_.max_header_bytes));
  parser_->body_limit(options_.max_body_bytes);
  ArmReadTimer(options_.header_timeout);
  http::async_read_header(socket_, buffer_, *parser_,
                          [self = shared_from_this()](error_code ec, size_t) {
                            self->OnHeader(ec);
                          });
}

void HttpConnection::OnHeader(error_code ec) {
  ++read_generation_;
  read_timer_.cancel();
  if (phase_ != Phase::kHeader) return;  // closed meanwhile
  if (ec) return OnReadError(ec);
  const auto& header = parser_->get();
  if (NeedsLength(header.method()) && !parser_->content_length().has_value() &&
      !parser_->chunked()) {
    return Refuse({411,
                   absl::StrCat(std::string(header.method_string()),
                                " needs a Content-Length header (or a chunked body)"),
                   "length_required"});
  }
  if (!parser_->is_done() && header.version() >= 11 &&
      boost::beast::iequals(header[http::field::expect], "100-continue")) {
    Queue(kContinue);
  }
  ReadBody();
}

void HttpConnection::ReadBody() {
  if (parser_->is_done()) return OnRequest();
  phase_ = Phase::kBody;
  ArmReadTimer(options_.body_timeout);
  http::async_read(socket_, buffer_, *parser_, [self = shared_from_this()](error_code ec, size_t) {
    self->OnBody(ec);
  });
}

void HttpConnection::OnBody(error_code ec) {
  ++read_generation_;
  read_timer_.cancel();
  if (phase_ != Phase::kBody) return;
  if (ec) return OnReadError(ec);
  OnRequest();
}

void HttpConnection::OnReadError(error_code ec) {
  if (read_timed_out_) {
    const bool header = phase_ == Phase::kHeader;
    if (header && !parser_->got_some() && buffer_.size() == 0) return Close();  // idle
    return Refuse({408,
                   absl::StrCat(header ? "the request headers" : "the request body",
                                " did not arrive within ",
                                Seconds(header ? options_.header_timeout : options_.body_timeout)),
                   "request_timeout"});
  }
  // The client closed between or in the middle of requests, or the socket failed.
  if (ec == http::error::end_of_stream || ec == http::error::partial_message ||
      ec.category() != http::make_error_code(http::error::end_of_stream).category()) {
    return Close();
  }
  Refuse(RefusalFor(ec, options_));
}

void HttpConnection::ArmReadTimer(absl::Duration timeout) {
  read_timed_out_ = false;
  read_timer_.expires_after(Chrono(timeout));
  read_timer_.async_wait(
      [self = shared_from_this(), generation = read_generation_](error_code ec) {
        if (ec || generation != self->read_generation_ || self->phase_ == Phase::kClosed) return;
        self->read_timed_out_ = true;
        error_code ignored;
        self->socket_.cancel(ignored);
      });
}

void HttpConnection::OnRequest() {
  request_ = parser_->release();
  parser_.reset();
  phase_ = Phase::kHandling;
  keep_alive_ = request_.keep_alive() && !peer_eof_;
  response_started_ = answered_ = chunked_ = false;
  ReadSome();
  app_->Handle(shared_from_this());
}

// Watching the socket while the application works, and lingering after a refusal.

void HttpConnection::ReadSome() {
  if (reading_some_ || peer_eof_) return;
  // Keeps what a pipelining client sends, up to a request's headers' worth; then stops watching.
  if (phase_ == Phase::kHandling && buffer_.size() >= options_.max_header_bytes) return;
  reading_some_ = true;
  socket_.async_read_some(buffer_.prepare(kReadSomeBytes),
                          [self = shared_from_this()](error_code ec, size_t n) {
                            self->OnReadSome(ec, n);
                          });
}

void HttpConnection::OnReadSome(error_code ec, size_t n) {
  reading_some_ = false;
  buffer_.commit(n);
  switch (phase_) {
    case Phase::kHandling:
      if (!ec) return ReadSome();
      if (ec == asio::error::eof) {
        peer_eof_ = true;
        keep_alive_ = false;
        return Probe();
      }
      if (ec != asio::error::operation_aborted) Close();  // reset: the client is gone
      return;
    case Phase::kNext:
      if (ec && ec != asio::error::operation_aborted && ec != asio::error::eof) return Close();
      return ReadHeader();
    case Phase::kLinger:
      buffer_.consume(buffer_.size());
      if (ec) return Close();
      return ReadSome();
    default:
      return;
  }
}

void HttpConnection::Probe() {
  if (phase_ != Phase::kHandling || response_started_ || request_.version() < 11) return;
  if (!write_pending()) Queue(kContinue);
  probe_timer_.expires_after(Chrono(options_.probe_interval));
  probe_timer_.async_wait([self = shared_from_this()](error_code ec) {
    if (!ec) self->Probe();
  });
}

// The answer.

void HttpConnection::Respond(HttpResponse response) {
  if (phase_ != Phase::kHandling || response_started_) return;
  response_started_ = answered_ = true;
  DropCallbacks();
  Queue(Serialize(std::move(response), request_.version(), keep_alive_));
}

void HttpConnection::StartStream(HttpResponse head) {
  if (phase_ != Phase::kHandling || response_started_) return;
  response_started_ = true;
  chunked_ = request_.version() >= 11;
  if (!chunked_) keep_alive_ = false;  // the body ends with the connection
  Queue(SerializeHead(head, request_.version(), keep_alive_, chunked_));
}

void HttpConnection::WriteChunk(std::string data) {
  if (phase_ != Phase::kHandling || !response_started_ || answered_ || data.empty()) return;
  if (!chunked_) return Queue(std::move(data));
  Queue(absl::StrCat(absl::Hex(data.size()), "\r\n", data, "\r\n"));
}

void HttpConnection::FinishStream() {
  if (phase_ != Phase::kHandling || !response_started_ || answered_) return;
  answered_ = true;
  DropCallbacks();
  if (chunked_) Queue("0\r\n\r\n");
  if (!write_pending()) EndExchange();
}

void HttpConnection::EndExchange() {
  probe_timer_.cancel();
  if (!keep_alive_) return Linger();
  phase_ = Phase::kNext;
  if (!reading_some_) return ReadHeader();
  error_code ignored;
  socket_.cancel(ignored);  // stops the watch; OnReadSome() goes on with the next request
}

void HttpConnection::Refuse(HttpRefusal refusal) {
  phase_ = Phase::kRefusing;
  keep_alive_ = false;
  const unsigned version = parser_.has_value() ? parser_->get().version() : 11;
  Queue(Serialize(app_->Refusal(refusal), version == 10 ? 10 : 11, /*keep_alive=*/false));
}

// Writing: one write in flight, the rest gathered behind it.

void HttpConnection::Queue(std::string bytes) {
  if (phase_ == Phase::kClosed) return;
  pending_.append(bytes);
  if (!writing_ && !pending_.empty()) StartWrite();
}

void HttpConnection::StartWrite() {
  writing_ = true;
  writing_buffer_.swap(pending_);
  pending_.clear();
  ++write_generation_;
  write_timer_.expires_after(Chrono(options_.write_timeout));
  write_timer_.async_wait(
      [self = shared_from_this(), generation = write_generation_](error_code ec) {
        if (!ec && generation == self->write_generation_) self->Close();  // the client does not read
      });
  asio::async_write(socket_, asio::buffer(writing_buffer_),
                    [self = shared_from_this()](error_code ec, size_t) { self->OnWrite(ec); });
}

void HttpConnection::OnWrite(error_code ec) {
  writing_ = false;
  ++write_generation_;
  write_timer_.cancel();
  if (phase_ == Phase::kClosed) return;
  if (ec) return Close();  // the client is gone
  if (!pending_.empty()) return StartWrite();
  if (close_after_write_) return Close();
  if (phase_ == Phase::kRefusing) return Linger();
  if (phase_ != Phase::kHandling) return;
  if (answered_) return EndExchange();
  if (on_drained_) {
    std::function<void()> on_drained = on_drained_;  // it may replace itself
    on_drained();
  }
}

// Closing.

void HttpConnection::Linger() {
  if (peer_eof_) return Close();  // nothing more will come
  phase_ = Phase::kLinger;
  error_code ignored;
  socket_.shutdown(asio::ip::tcp::socket::shutdown_send, ignored);
  buffer_.consume(buffer_.size());
  ++read_generation_;
  read_timer_.expires_after(Chrono(options_.linger));
  read_timer_.async_wait([self = shared_from_this()](error_code ec) {
    if (!ec) self->Close();
  });
  ReadSome();
}

void HttpConnection::Close() {
  if (phase_ == Phase::kClosed) return;
  phase_ = Phase::kClosed;
  error_code ignored;
  socket_.close(ignored);
  read_timer_.cancel();
  probe_timer_.cancel();
  write_timer_.cancel();
  absl::AnyInvocable<void()> on_client_gone = std::move(on_client_gone_);
  DropCallbacks();
  if (on_client_gone != nullptr) on_client_gone();
}

void HttpConnection::DropCallbacks() {
  on_client_gone_ = nullptr;
  on_drained_ = nullptr;
}

}  // namespace baton::router
