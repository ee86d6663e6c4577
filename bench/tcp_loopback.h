// Measures how fast plain TCP moves bytes over 127.0.0.1 on this machine: the ceiling for any
// transport over loopback, and the baseline `bench handoff` reports the gRPC KV push against.
//
// Thread-safety: a plain function; it starts and joins its own thread.
#ifndef BATON_BENCH_TCP_LOOPBACK_H_
#define BATON_BENCH_TCP_LOOPBACK_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/statusor.h"

namespace baton::bench {

// Best-of-`repeats` bytes/second sending `bytes` over one TCP connection on 127.0.0.1, in
// `message_bytes` writes, from one thread to another that reads them into one buffer (two
// copies, user to kernel and back, as every loopback transport pays). UNAVAILABLE when a socket
// call fails.
absl::StatusOr<double> MeasureTcpLoopback(int64_t bytes, size_t message_bytes = size_t{1} << 20,
                                          int repeats = 3);

}  // namespace baton::bench

#endif  // BATON_BENCH_TCP_LOOPBACK_H_
