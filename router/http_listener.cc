#include "router/http_listener.h"

#include <chrono>
#include <future>
#include <utility>
#include <vector>

#include <boost/asio/post.hpp>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"

namespace baton::router {

namespace asio = boost::asio;
using asio::ip::tcp;
using boost::system::error_code;

// The open connections, counted in all and per client, and reachable for AbortAll().
class HttpListener::Registry {
 public:
  enum class Verdict { kAdmit, kTooMany, kTooManyFromClient, kDrop };

  Verdict Admit(const std::string& client, const HttpListenerOptions& options, uint64_t* id) {
    absl::MutexLock lock(&mu_);
    *id = next_id_++;
    Verdict verdict = Verdict::kAdmit;
    if (open_ >= options.max_connections) {
      verdict = Verdict::kTooMany;
    } else if (auto it = per_client_.find(client);
               it != per_client_.end() && it->second >= options.max_connections_per_client) {
      verdict = Verdict::kTooManyFromClient;
    }
    if (verdict == Verdict::kAdmit) {
      ++open_;
      ++per_client_[client];
    } else if (refusing_ >= options.max_connections) {
      verdict = Verdict::kDrop;  // even refusing them costs too much now
    } else {
      ++refusing_;
    }
    return verdict;
  }

  void Add(uint64_t id, std::weak_ptr<HttpConnection> connection) {
    absl::MutexLock lock(&mu_);
    live_.emplace(id, std::move(connection));
  }

  // `client` empty: a refused connection.
  void Leave(uint64_t id, const std::string& client) {
    absl::MutexLock lock(&mu_);
    live_.erase(id);
    if (client.empty()) {
      --refusing_;
      return;
    }
    --open_;
    if (auto it = per_client_.find(client); it != per_client_.end() && --it->second == 0) {
      per_client_.erase(it);
    }
  }

  std::vector<std::shared_ptr<HttpConnection>> All() {
    std::vector<std::shared_ptr<HttpConnection>> all;
    absl::MutexLock lock(&mu_);
    for (const auto& [id, weak] : live_) {
      if (std::shared_ptr<HttpConnection> connection = weak.lock()) all.push_back(connection);
    }
    return all;
  }

  int open() {
    absl::MutexLock lock(&mu_);
    return open_;
  }

  bool WaitForEmpty(absl::Time deadline) {
    absl::MutexLock lock(&mu_);
    auto empty = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return open_ == 0 && refusing_ == 0;
    };
    return mu_.AwaitWithDeadline(absl::Condition(&empty), deadline);
  }

 private:
  absl::Mutex mu_;
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 0;
  int open_ ABSL_GUARDED_BY(mu_) = 0;
  int refusing_ ABSL_GUARDED_BY(mu_) = 0;
  absl::flat_hash_map<std::string, int> per_client_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<uint64_t, std::weak_ptr<HttpConnection>> live_ ABSL_GUARDED_BY(mu_);
};

HttpListener::HttpListener(asio::io_context& io, HttpListenerOptions options,
                           HttpConnectionOptions connection_options, HttpApplication* app)
    : io_(io),
      options_(std::move(options)),
      connection_options_(connection_options),
      app_(app),
      strand_(asio::make_strand(io)),
      acceptor_(strand_),
      retry_timer_(strand_),
      registry_(std::make_shared<Registry>()) {}

HttpListener::~HttpListener() = default;

absl::Status HttpListener::Listen() {
  const std::string where = absl::StrCat(options_.host, ":", options_.port);
  error_code ec;
  tcp::resolver resolver(io_);
  const tcp::resolver::results_type endpoints = resolver.resolve(
      options_.host, std::to_string(options_.port), tcp::resolver::passive, ec);
  if (ec || endpoints.empty()) {
    return absl::UnavailableError(absl::StrCat("cannot resolve the HTTP address ", where, ": ",
                                               ec ? ec.message() : "no address"));
  }
  const tcp::endpoint endpoint = endpoints.begin()->endpoint();
  acceptor_.open(endpoint.protocol(), ec);
  if (!ec) acceptor_.set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) acceptor_.bind(endpoint, ec);
  if (!ec) acceptor_.listen(options_.backlog, ec);
  if (!ec) port_ = acceptor_.local_endpoint(ec).port();
  if (ec) {
    error_code ignored;
    acceptor_.close(ignored);
    return absl::UnavailableError(
        absl::StrCat("cannot listen for HTTP on ", where, ": ", ec.message()));
  }
  return absl::OkStatus();
}

void HttpListener::Accept() {
  asio::post(strand_, [this] { AcceptNext(); });
}

void HttpListener::AcceptNext() {
  acceptor_.async_accept(asio::make_strand(io_), [this](error_code ec, tcp::socket socket) {
    OnAccept(ec, std::move(socket));
  });
}

void HttpListener::OnAccept(error_code ec, tcp::socket socket) {
  if (!acceptor_.is_open()) return;
  if (ec) {
    // Out of descriptors, or the like: try again shortly instead of spinning.
    retry_timer_.expires_after(std::chrono::milliseconds(50));
    retry_timer_.async_wait([this](error_code ec) {
      if (!ec && acceptor_.is_open()) AcceptNext();
    });
    return;
  }
  AcceptNext();
  const tcp::endpoint remote = socket.remote_endpoint(ec);
  if (ec) return;  // already gone
  const std::string client = remote.address().to_string();
  uint64_t id = 0;
  const Registry::Verdict verdict = registry_->Admit(client, options_, &id);
  if (verdict == Registry::Verdict::kDrop) return;  // the socket closes here
  const bool admitted = verdict == Registry::Verdict::kAdmit;
  auto connection = std::make_shared<HttpConnection>(
      std::move(socket), connection_options_, app_,
      [registry = registry_, id, client = admitted ? client : std::string()] {
        registry->Leave(id, client);
      });
  registry_->Add(id, connection);
  if (admitted) return connection->Start();
  connection->StartRefusing(
      {503,
       verdict == Registry::Verdict::kTooMany
           ? absl::StrCat("the server has ", options_.max_connections,
                          " connections open, its limit; retry later")
           : absl::StrCat("this client has ", options_.max_connections_per_client,
                          " connections open, the limit per client; retry later"),
       "too_many_connections"});
}

void HttpListener::StopAccepting() {
  std::promise<void> closed;
  asio::post(strand_, [this, &closed] {
    error_code ignored;
    acceptor_.close(ignored);
    retry_timer_.cancel();
    closed.set_value();
  });
  closed.get_future().wait();
}

void HttpListener::AbortAll() {
  for (const std::shared_ptr<HttpConnection>& connection : registry_->All()) connection->Abort();
}

int HttpListener::connections() const { return registry_->open(); }

bool HttpListener::WaitForNoConnections(absl::Time deadline) {
  return registry_->WaitForEmpty(deadline);
}

}  // namespace baton::router
