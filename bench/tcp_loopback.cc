#include "bench/tcp_loopback.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"

namespace baton::bench {
namespace {

absl::Status SocketError(const char* what) {
  return absl::UnavailableError(absl::StrCat("tcp loopback: ", what, ": ", std::strerror(errno)));
}

// A connected pair of sockets over 127.0.0.1.
struct SocketPair {
  int sender = -1;
  int receiver = -1;
  ~SocketPair() {
    if (sender >= 0) close(sender);
    if (receiver >= 0) close(receiver);
  }
};

absl::Status Connect(SocketPair& pair) {
  const int listener = socket(AF_INET, SOCK_STREAM, 0);
  if (listener < 0) return SocketError("socket");
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof address;
  absl::Status status;
  if (bind(listener, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0 ||
      listen(listener, 1) != 0 ||
      getsockname(listener, reinterpret_cast<sockaddr*>(&address), &length) != 0) {
    status = SocketError("listen");
  } else if ((pair.sender = socket(AF_INET, SOCK_STREAM, 0)) < 0 ||
             connect(pair.sender, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0) {
    status = SocketError("connect");
  } else if ((pair.receiver = accept(listener, nullptr, nullptr)) < 0) {
    status = SocketError("accept");
  }
  close(listener);
  return status;
}

// Seconds to send `bytes` from one end of `pair` to the other.
absl::StatusOr<double> SendOnce(SocketPair& pair, int64_t bytes, size_t message_bytes) {
  std::vector<char> out(message_bytes, 'x');
  std::vector<char> in(message_bytes);
  int64_t received = 0;
  std::thread reader([&] {
    while (received < bytes) {
      const ssize_t n = read(pair.receiver, in.data(), in.size());
      if (n <= 0) return;
      received += n;
    }
  });
  const auto start = std::chrono::steady_clock::now();
  absl::Status status;
  for (int64_t sent = 0; sent < bytes && status.ok();) {
    const size_t want = static_cast<size_t>(std::min<int64_t>(message_bytes, bytes - sent));
    const ssize_t n = write(pair.sender, out.data(), want);
    if (n <= 0) {
      status = SocketError("write");
      shutdown(pair.receiver, SHUT_RDWR);  // lets the reader return
    } else {
      sent += n;
    }
  }
  reader.join();
  if (!status.ok()) return status;
  if (received < bytes) return absl::UnavailableError("tcp loopback: the reader stopped early");
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

absl::StatusOr<double> MeasureTcpLoopback(int64_t bytes, size_t message_bytes, int repeats) {
  SocketPair pair;
  if (absl::Status s = Connect(pair); !s.ok()) return s;
  double best = 0;
  for (int i = 0; i < std::max(1, repeats); ++i) {
    absl::StatusOr<double> seconds = SendOnce(pair, bytes, message_bytes);
    if (!seconds.ok()) return seconds.status();
    best = std::max(best, static_cast<double>(bytes) / *seconds);
  }
  return best;
}

}  // namespace baton::bench
