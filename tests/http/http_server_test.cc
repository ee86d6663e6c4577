// The router's HTTP server (router/http_server.h) in-process on 127.0.0.1, against hostile and
// unusual clients over raw sockets: bad and conflicting Content-Length, missing lengths, limits
// on headers, bodies, time and connections, half-closed and pipelined connections, slow clients
// beside /health, and clients that go away while their request runs. The request path behind it
// is the router's own (intake, admission, drivers on a request pool) with fake prefill and decode
// workers (tests/router/fake_workers.h); the tokenizer is the default model's.
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <boost/asio/buffer.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "router/generate_reactor.h"
#include "router/http_server.h"
#include "router/request_pool.h"
#include "router/request_table.h"
#include "router/served_model.h"
#include "router/static_worker_poller.h"
#include "router/worker_channels.h"
#include "router/worker_registry.h"
#include "tests/router/fake_workers.h"
#include "tests/support/test_paths.h"

namespace baton::router {
namespace {

namespace http = boost::beast::http;
using json = nlohmann::json;
using ::testing::HasSubstr;
using testing::FakeDecodeWorker;
using testing::FakePrefillWorker;
using testing::FakeServer;
using testing::StartFakeServer;
using testing::WaitUntil;

// Generous: only a broken server takes this long.
constexpr absl::Duration kDeadline = absl::Seconds(20);

struct Reply {
  int status = 0;
  std::string body;
  std::string connection;  // the Connection header
  std::string content_type;
  json Json() const { return json::parse(body, nullptr, /*allow_exceptions=*/false); }
  std::string ErrorCode() const {
    const json j = Json();
    if (!j.is_object() || !j.contains("error") || !j["error"]["code"].is_string()) return "";
    return j["error"]["code"];
  }
};

// A client on a plain socket: sends whatever bytes a test wants, reads responses with Beast's
// parser (interim 1xx responses skipped).
class RawClient {
 public:
  explicit RawClient(int port) {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(static_cast<uint16_t>(port));
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected_ = connect(fd_, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0;
  }
  ~RawClient() { Close(); }
  RawClient(const RawClient&) = delete;
  RawClient& operator=(const RawClient&) = delete;

  bool connected() const { return connected_; }

  bool Send(const std::string& bytes) {
    size_t sent = 0;
    while (sent < bytes.size()) {
      const ssize_t n = send(fd_, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
      if (n <= 0) return false;
      sent += static_cast<size_t>(n);
    }
    return true;
  }
  void ShutdownWrite() { shutdown(fd_, SHUT_WR); }
  // Closes with a reset instead of an orderly end of stream.
  void Reset() {
    linger option{.l_onoff = 1, .l_linger = 0};
    setsockopt(fd_, SOL_SOCKET, SO_LINGER, &option, sizeof(option));
    Close();
  }
  void Close() {
    if (fd_ >= 0) close(fd_);
    fd_ = -1;
  }

  // The next final response, or nothing when the connection ends or `timeout` passes first.
  std::optional<Reply> Read(absl::Duration timeout = kDeadline) {
    const absl::Time deadline = absl::Now() + timeout;
    while (true) {
      http::response_parser<http::string_body> parser;
      parser.eager(true);
      if (!Parse(parser, deadline)) return std::nullopt;
      const auto& message = parser.get();
      if (message.result_int() / 100 == 1) continue;  // interim
      return Reply{.status = static_cast<int>(message.result_int()),
                   .body = message.body(),
                   .connection = std::string(message[http::field::connection]),
                   .content_type = std::string(message[http::field::content_type])};
    }
  }

  // Whether the server closed the connection (end of stream or reset) before `timeout`.
  bool WaitClosed(absl::Duration timeout = kDeadline) {
    const absl::Time deadline = absl::Now() + timeout;
    char buffer[4096];
    while (absl::Now() < deadline) {
      if (!Readable(deadline)) return false;
      const ssize_t n = recv(fd_, buffer, sizeof(buffer), 0);
      if (n <= 0) return true;
    }
    return false;
  }

 private:
  bool Readable(absl::Time deadline) {
    pollfd p{.fd = fd_, .events = POLLIN, .revents = 0};
    const int ms = static_cast<int>(
        std::max<int64_t>(0, absl::ToInt64Milliseconds(deadline - absl::Now())));
    return poll(&p, 1, ms) > 0;
  }

  bool Parse(http::response_parser<http::string_body>& parser, absl::Time deadline) {
    while (true) {
      if (!unread_.empty()) {
        boost::system::error_code ec;
        const size_t used = parser.put(boost::asio::buffer(unread_), ec);
        unread_.erase(0, used);
        if (parser.is_done()) return true;
        if (ec && ec != http::error::need_more) return false;
        if (used > 0 && !unread_.empty()) continue;
      }
      if (!Readable(deadline)) return false;
      char buffer[4096];
      const ssize_t n = recv(fd_, buffer, sizeof(buffer), 0);
      if (n <= 0) {
        boost::system::error_code ec;
        parser.put_eof(ec);  // a body that ends with the connection
        return !ec && parser.is_done();
      }
      unread_.append(buffer, static_cast<size_t>(n));
    }
  }

  int fd_ = -1;
  bool connected_ = false;
  std::string unread_;
};

std::string Post(const std::string& path, const std::string& body,
                 const std::string& extra_headers = "") {
  return absl::StrCat("POST ", path, " HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n",
                      extra_headers, "Content-Length: ", body.size(), "\r\n\r\n", body);
}
std::string Get(const std::string& path, const std::string& extra_headers = "") {
  return absl::StrCat("GET ", path, " HTTP/1.1\r\nHost: t\r\n", extra_headers, "\r\n");
}

class HttpServerTest : public testing::FakeWorkersTest {
 protected:
  void SetUp() override {
    FakeWorkersTest::SetUp();
    if (HasFatalFailure()) return;

    registry_ = std::make_unique<WorkerRegistry>(
        WorkerRegistryOptions{.model_fingerprint = model_->fingerprint(),
                              .heartbeat_interval = absl::Milliseconds(100),
                              .heartbeat_timeout = absl::Seconds(5)});
    registry_->AddStatic(v1::WORKER_ROLE_PREFILL, prefill_server_.address());
    registry_->AddStatic(v1::WORKER_ROLE_DECODE, decode_server_.address());
    table_ = std::make_unique<RequestTable>(/*max_queued=*/16);
    channels_ = std::make_unique<WorkerChannels>(rpc::ClientOptions{});
    pool_ = std::make_unique<RequestPool>(/*max_threads=*/16);
    env_.driver = RequestDriverDeps{
        .model = model_,
        .registry = registry_.get(),
        .table = table_.get(),
        .channels = channels_.get(),
        .options = {.queue_poll_interval = absl::Milliseconds(100)}};
    env_.pool = pool_.get();
    env_.draining = &draining_;
    poller_ = std::make_unique<StaticWorkerPoller>(registry_.get(), channels_.get());
    poller_->Start(absl::Seconds(5));
  }

  void TearDown() override {
    draining_.store(true);
    if (server_ != nullptr) server_->Shutdown(absl::Now() + absl::Seconds(5));
    server_.reset();
    pool_->Stop();
    poller_->Stop();
    for (FakeServer* s : {&prefill_server_, &decode_server_}) {
      if (s->server != nullptr) s->server->Shutdown(std::chrono::system_clock::now());
    }
  }

  static HttpServerOptions SmallOptions() {
    HttpServerOptions options;
    options.max_body_bytes = 64 << 10;
    options.ping_interval = absl::Milliseconds(200);
    options.stream_status_wait = absl::Milliseconds(200);
    return options;
  }

  void StartServer(HttpServerOptions options = SmallOptions()) {
    server_ = std::make_unique<HttpServer>(std::move(options), &env_);
    absl::Status started = server_->Start();
    ASSERT_TRUE(started.ok()) << started;
  }
  int port() const { return server_->port(); }

  // Scripts the workers to "generate" the tokens of `text`: the first from prefill, the rest
  // from decode, which then holds its stream open (until cancelled) when `hold_open`.
  void Script(const std::string& text, bool hold_open = false) {
    const std::vector<int32_t> tokens = model_->tokenizer().Encode(text, {});
    prefill_->set_first_token(tokens.front());
    decode_->set_script({.tokens = std::vector<int32_t>(tokens.begin() + 1, tokens.end()),
                         .hold_open = hold_open});
  }

  // Starts the server and sends a completion whose decode stream the fake worker holds open;
  // returns the client once the request has reached the decode worker (nullptr if it did not).
  std::unique_ptr<RawClient> SendHeldOpenCompletion(bool stream);

  // A single request on a fresh connection.
  std::optional<Reply> Exchange(const std::string& request) {
    RawClient client(port());
    if (!client.connected() || !client.Send(request)) return std::nullopt;
    return client.Read();
  }

  std::unique_ptr<WorkerRegistry> registry_;
  std::unique_ptr<RequestTable> table_;
  std::unique_ptr<WorkerChannels> channels_;
  std::unique_ptr<RequestPool> pool_;
  std::unique_ptr<StaticWorkerPoller> poller_;
  std::atomic<bool> draining_{false};
  GenerateEnv env_;
  std::unique_ptr<HttpServer> server_;
};

std::unique_ptr<RawClient> HttpServerTest::SendHeldOpenCompletion(bool stream) {
  StartServer();
  Script("Once upon a time", /*hold_open=*/true);
  auto client = std::make_unique<RawClient>(port());
  const std::string body = absl::StrCat(R"({"prompt": "Once", "max_tokens": 2000, )",
                                        R"("ignore_eos": true, "stream": )",
                                        stream ? "true}" : "false}");
  if (!client->Send(Post("/v1/completions", body)) ||
      !WaitUntil([&] { return decode_->decodes().size() == 1; }, kDeadline)) {
    ADD_FAILURE() << "the held-open request did not reach the decode worker";
    return nullptr;
  }
  return client;
}


void ExpectRefusal(const std::optional<Reply>& reply, int status, const std::string& code) {
  ASSERT_TRUE(reply.has_value()) << "no answer for the " << status << " case";
  EXPECT_EQ(reply->status, status) << reply->body;
  EXPECT_EQ(reply->content_type, "application/json");
  EXPECT_EQ(reply->ErrorCode(), code) << reply->body;
  EXPECT_EQ(reply->connection, "close");
}

TEST_F(HttpServerTest, BadContentLengthIs400) {
  StartServer();
  const std::string head = "POST /v1/completions HTTP/1.1\r\nHost: t\r\n";
  ExpectRefusal(Exchange(head + "Content-Length: -5\r\n\r\n"), 400, "invalid_content_length");
  ExpectRefusal(Exchange(head + "Content-Length: 12abc\r\n\r\n{}"), 400, "invalid_content_length");
  ExpectRefusal(Exchange(head + "Content-Length: 99999999999999999999999\r\n\r\n"), 400,
                "invalid_content_length");
  ExpectRefusal(Exchange(head + "Content-Length: 2\r\nContent-Length: 3\r\n\r\n{}"), 400,
                "invalid_content_length");
  ExpectRefusal(Exchange(head + "Content-Length: 2, 3\r\n\r\n{}"), 400, "invalid_content_length");
  ExpectRefusal(
      Exchange(head + "Content-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"), 400,
      "bad_request");
  ExpectRefusal(Exchange("NOT AN HTTP REQUEST\r\n\r\n"), 400, "bad_request");
}

TEST_F(HttpServerTest, LengthLimitsAnswerAtOnce) {
  StartServer();
  // Over the body limit: 413 before the body is sent (this client never sends it).
  ExpectRefusal(Exchange("POST /v1/completions HTTP/1.1\r\nHost: t\r\nContent-Length: "
                         "1000000000\r\n\r\n"),
                413, "request_too_large");
  // A chunked body that grows past it.
  RawClient chunked(port());
  ASSERT_TRUE(chunked.Send(
      "POST /v1/completions HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n"));
  const std::string piece(16 << 10, 'a');
  for (int i = 0; i < 5; ++i) chunked.Send(absl::StrCat(absl::Hex(piece.size()), "\r\n", piece,
                                                        "\r\n"));
  ExpectRefusal(chunked.Read(), 413, "request_too_large");
  // No length at all.
  ExpectRefusal(Exchange("POST /v1/completions HTTP/1.1\r\nHost: t\r\n\r\n"), 411,
                "length_required");
  // Headers over 16 KiB.
  ExpectRefusal(Exchange(Get("/health", absl::StrCat("X-Big: ", std::string(20 << 10, 'b'),
                                                     "\r\n"))),
                431, "headers_too_large");
}

TEST_F(HttpServerTest, ChunkedBodyAndExpectContinueAreRead) {
  StartServer();
  // A chunked JSON body reaches the OpenAI parser (which refuses it for its content: n past
  // kMaxChoices).
  std::optional<Reply> reply =
      Exchange("POST /v1/completions HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n"
               "6\r\n{\"n\": \r\n3\r\n17}\r\n0\r\n\r\n");
  ASSERT_TRUE(reply.has_value());
  EXPECT_EQ(reply->status, 400) << reply->body;
  EXPECT_EQ(reply->Json()["error"]["param"], "n") << reply->body;

  RawClient client(port());
  const std::string body = R"({"prompt": "Hi", "n": 17})";
  ASSERT_TRUE(client.Send(absl::StrCat(
      "POST /v1/completions HTTP/1.1\r\nHost: t\r\nExpect: 100-continue\r\nContent-Length: ",
      body.size(), "\r\n\r\n")));
  ASSERT_TRUE(client.Send(body));
  reply = client.Read();
  ASSERT_TRUE(reply.has_value());
  EXPECT_EQ(reply->status, 400) << reply->body;
}

TEST_F(HttpServerTest, SlowRequestsGet408) {
  HttpServerOptions options = SmallOptions();
  options.header_timeout = absl::Seconds(1);
  options.body_timeout = absl::Seconds(1);
  StartServer(options);
  RawClient headers(port());
  ASSERT_TRUE(headers.Send("GET /health HTTP/1.1\r\nHost: t\r\n"));  // never finished
  ExpectRefusal(headers.Read(), 408, "request_timeout");
  RawClient body(port());
  ASSERT_TRUE(body.Send(absl::StrCat("POST /v1/completions HTTP/1.1\r\nHost: t\r\n",
                                     "Content-Length: 100\r\n\r\n{\"prompt\"")));
  ExpectRefusal(body.Read(), 408, "request_timeout");
  // A connection that never sends anything is just closed.
  RawClient silent(port());
  EXPECT_TRUE(silent.WaitClosed());
}

TEST_F(HttpServerTest, HealthCountsNoDrainingWorker) {
  StartServer();
  std::optional<Reply> health = Exchange(Get("/health"));
  ASSERT_TRUE(health.has_value());
  EXPECT_EQ(health->status, 200) << health->body;
  // The decode worker still runs a sequence, so draining keeps it (healthy) in the registry.
  decode_->set_running_sequences(1);
  std::string decode_id;
  for (int i = 0; i < 100 && decode_id.empty(); ++i) {
    for (const WorkerSnapshot& w : registry_->Snapshot()) {
      if (w.role == v1::WORKER_ROLE_DECODE && w.load.running_sequences() == 1) decode_id = w.id;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_FALSE(decode_id.empty()) << "the poll never reported the running sequence";
  registry_->Drain(decode_id);
  ASSERT_EQ(registry_->Snapshot().size(), 2u);
  health = Exchange(Get("/health"));
  ASSERT_TRUE(health.has_value());
  EXPECT_EQ(health->status, 503) << health->body;
  EXPECT_THAT(health->body, HasSubstr("no healthy decode-capable worker"));
}

TEST_F(HttpServerTest, SlowClientsDoNotBlockHealth) {
  StartServer();  // 2 io threads, far fewer than the slow clients
  std::vector<std::unique_ptr<RawClient>> slow;
  for (int i = 0; i < 40; ++i) {
    slow.push_back(std::make_unique<RawClient>(port()));
    ASSERT_TRUE(slow.back()->connected());
    // Headers and part of the body, then nothing.
    ASSERT_TRUE(slow.back()->Send(
        "POST /v1/completions HTTP/1.1\r\nHost: t\r\nContent-Length: 100\r\n\r\n{\"prompt\""));
  }
  for (int i = 0; i < 5; ++i) {
    std::optional<Reply> health = Exchange(Get("/health"));
    ASSERT_TRUE(health.has_value());
    EXPECT_EQ(health->status, 200) << health->body;
    std::optional<Reply> metrics = Exchange(Get("/metrics"));
    ASSERT_TRUE(metrics.has_value());
    EXPECT_EQ(metrics->status, 200);
  }
}

TEST_F(HttpServerTest, PastTheConnectionLimitsIs503AtOnce) {
  HttpServerOptions options = SmallOptions();
  options.max_connections = 6;
  options.max_connections_per_client = 4;
  options.header_timeout = absl::Minutes(5);  // the held connections stay
  StartServer(options);
  std::vector<std::unique_ptr<RawClient>> held;
  for (int i = 0; i < 4; ++i) {
    held.push_back(std::make_unique<RawClient>(port()));
    ASSERT_TRUE(held.back()->Send("GET /health HTTP/1.1\r\nHost: t\r\n"));  // unfinished
  }
  // This client (127.0.0.1) holds its 4.
  std::optional<Reply> refused = Exchange(Get("/health"));
  ExpectRefusal(refused, 503, "too_many_connections");
  EXPECT_THAT(refused->body, HasSubstr("per client"));
  EXPECT_EQ(refused->Json()["error"]["type"], "service_unavailable_error");
  // Once one of them closes, a new connection gets in.
  held.pop_back();
  EXPECT_TRUE(WaitUntil(
      [&] {
        std::optional<Reply> health = Exchange(Get("/health"));
        return health.has_value() && health->status == 200;
      },
      kDeadline));
}

TEST_F(HttpServerTest, PastTheTotalConnectionLimitIs503) {
  HttpServerOptions options = SmallOptions();
  options.max_connections = 3;
  options.header_timeout = absl::Minutes(5);
  StartServer(options);
  std::vector<std::unique_ptr<RawClient>> held;
  for (int i = 0; i < 3; ++i) {
    held.push_back(std::make_unique<RawClient>(port()));
    ASSERT_TRUE(held.back()->Send("GET /health HTTP/1.1\r\nHost: t\r\n"));
  }
  std::optional<Reply> refused = Exchange(Get("/health"));
  ExpectRefusal(refused, 503, "too_many_connections");
  EXPECT_THAT(refused->body, HasSubstr("3 connections open"));
}

TEST_F(HttpServerTest, KeepAliveAndPipelining) {
  StartServer();
  RawClient client(port());
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(client.Send(Get("/health")));
    std::optional<Reply> reply = client.Read();
    ASSERT_TRUE(reply.has_value()) << i;
    EXPECT_EQ(reply->status, 200);
    EXPECT_NE(reply->connection, "close");
  }
  // Two requests in one write, answered in order.
  ASSERT_TRUE(client.Send(Get("/v1/models") + Get("/v1/nothing")));
  std::optional<Reply> models = client.Read();
  ASSERT_TRUE(models.has_value());
  EXPECT_EQ(models->status, 200);
  EXPECT_EQ(models->Json()["data"][0]["id"], model_->id());
  std::optional<Reply> missing = client.Read();
  ASSERT_TRUE(missing.has_value());
  EXPECT_EQ(missing->status, 404);
  EXPECT_EQ(missing->ErrorCode(), "not_found");
  // Connection: close is honoured.
  ASSERT_TRUE(client.Send(Get("/health", "Connection: close\r\n")));
  std::optional<Reply> last = client.Read();
  ASSERT_TRUE(last.has_value());
  EXPECT_EQ(last->connection, "close");
  EXPECT_TRUE(client.WaitClosed());
}

TEST_F(HttpServerTest, HalfClosedClientsGetTheirAnswer) {
  StartServer();
  Script("Paris is the capital of France.");
  RawClient health(port());
  ASSERT_TRUE(health.Send(Get("/health")));
  health.ShutdownWrite();
  std::optional<Reply> reply = health.Read();
  ASSERT_TRUE(reply.has_value());
  EXPECT_EQ(reply->status, 200);

  RawClient generate(port());
  ASSERT_TRUE(generate.Send(
      Post("/v1/completions", R"({"prompt": "The capital of France is", "max_tokens": 20})")));
  generate.ShutdownWrite();
  reply = generate.Read();
  ASSERT_TRUE(reply.has_value());
  ASSERT_EQ(reply->status, 200) << reply->body;
  EXPECT_EQ(reply->Json()["choices"][0]["text"], "Paris is the capital of France.");
  EXPECT_TRUE(generate.WaitClosed());
}

TEST_F(HttpServerTest, StreamingAndNonStreamingAnswers) {
  StartServer();
  Script("Rivers flow to the sea.");
  std::optional<Reply> whole =
      Exchange(Post("/v1/completions", R"({"prompt": "Rivers", "max_tokens": 30})"));
  ASSERT_TRUE(whole.has_value());
  ASSERT_EQ(whole->status, 200) << whole->body;
  EXPECT_EQ(whole->Json()["choices"][0]["text"], "Rivers flow to the sea.");
  EXPECT_EQ(whole->Json()["choices"][0]["finish_reason"], "stop");

  std::optional<Reply> streamed = Exchange(Post(
      "/v1/chat/completions",
      R"({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 30, "stream": true})"));
  ASSERT_TRUE(streamed.has_value());
  ASSERT_EQ(streamed->status, 200) << streamed->body;
  EXPECT_EQ(streamed->content_type, "text/event-stream");
  EXPECT_THAT(streamed->body, HasSubstr("\"role\":\"assistant\""));
  EXPECT_THAT(streamed->body, HasSubstr("data: [DONE]\n\n"));

  // HTTP/1.0: no chunked framing; the stream ends with the connection.
  RawClient old(port());
  const std::string body = R"({"prompt": "Rivers", "max_tokens": 30, "stream": true})";
  ASSERT_TRUE(old.Send(absl::StrCat("POST /v1/completions HTTP/1.0\r\nContent-Length: ",
                                    body.size(), "\r\n\r\n", body)));
  std::optional<Reply> reply = old.Read();
  ASSERT_TRUE(reply.has_value());
  EXPECT_EQ(reply->status, 200);
  EXPECT_THAT(reply->body, HasSubstr("data: [DONE]\n\n"));
}

// The request holds its decode stream open until cancelled; only the client's going away can end
// it before the test's deadline.
void ExpectCancelledEverywhere(FakeDecodeWorker& decode, RequestTable& table) {
  EXPECT_TRUE(WaitUntil([&] { return decode.cancelled_streams() == 1; }, kDeadline));
  EXPECT_TRUE(WaitUntil([&] { return decode.releases().size() == 1; }, kDeadline));
  EXPECT_TRUE(WaitUntil([&] { return table.active() == 0 && table.queued() == 0; }, kDeadline));
}

TEST_F(HttpServerTest, NonStreamingClientThatClosesIsCancelled) {
  std::unique_ptr<RawClient> held = SendHeldOpenCompletion(/*stream=*/false);
  ASSERT_NE(held, nullptr);
  RawClient& client = *held;
  client.Close();  // an orderly close: the server must tell it from a half-close
  ExpectCancelledEverywhere(*decode_, *table_);
}

TEST_F(HttpServerTest, NonStreamingClientThatResetsIsCancelled) {
  std::unique_ptr<RawClient> held = SendHeldOpenCompletion(/*stream=*/false);
  ASSERT_NE(held, nullptr);
  RawClient& client = *held;
  client.Reset();
  ExpectCancelledEverywhere(*decode_, *table_);
}

TEST_F(HttpServerTest, StreamingClientThatClosesIsCancelled) {
  std::unique_ptr<RawClient> held = SendHeldOpenCompletion(/*stream=*/true);
  ASSERT_NE(held, nullptr);
  RawClient& client = *held;
  client.Close();
  ExpectCancelledEverywhere(*decode_, *table_);
}

TEST_F(HttpServerTest, ShutdownCancelsWhatIsLeftAndTellsTheClient) {
  std::unique_ptr<RawClient> held = SendHeldOpenCompletion(/*stream=*/false);
  ASSERT_NE(held, nullptr);
  RawClient& client = *held;
  draining_.store(true);
  server_->Shutdown(absl::Now());
  std::optional<Reply> reply = client.Read();
  ASSERT_TRUE(reply.has_value());
  EXPECT_EQ(reply->status, 503) << reply->body;
  EXPECT_TRUE(WaitUntil([&] { return decode_->releases().size() == 1; }, kDeadline));
}

}  // namespace
}  // namespace baton::router
