// Admission of a Generate request, shared by every front end (the gRPC Generate reactor and the
// OpenAI-compatible HTTP handlers): the checks every request passes before it is driven, its
// entry in the RequestTable, its RequestDriver, and its hand-off to the request pool.
//
//   absl::StatusOr<std::shared_ptr<RequestDriver>> driver =
//       CreateDriver(env, request, id, received, deadline, sink);
//   if (!driver.ok()) ... answer driver.status() ...
//   ... keep *driver where a cancellation can reach it ...
//   if (absl::Status s = LaunchDriver(env, *driver, keep_alive); !s.ok()) ... answer s ...
//
// Once LaunchDriver succeeded the driver may run at any moment on a pool thread and close the
// sink; the front end learns the outcome only through the sink.
//
// Thread-safety: thread-safe (the table and the pool are).
#ifndef BATON_ROUTER_REQUEST_ADMISSION_H_
#define BATON_ROUTER_REQUEST_ADMISSION_H_

#include <cstddef>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "baton/v1/router.pb.h"
#include "router/generate_reactor.h"
#include "router/request_driver.h"

namespace baton::router {

inline constexpr size_t kMaxRequestIdBytes = 256;

// UNAVAILABLE while the router drains; INVALID_ARGUMENT for a request id longer than
// kMaxRequestIdBytes; ALREADY_EXISTS when a request with that id is in flight. Otherwise the
// request is in the table (state "received") and its driver, not yet running, is returned.
// `sink` must stay valid until the driver closes it.
absl::StatusOr<std::shared_ptr<RequestDriver>> CreateDriver(const GenerateEnv& env,
                                                            const v1::GenerateRequest& request,
                                                            const std::string& request_id,
                                                            absl::Time received,
                                                            absl::Time deadline,
                                                            ResponseSink* sink);

// Submits the driver to the request pool. When every request thread is busy the request enters
// the router's queue first: RESOURCE_EXHAUSTED when that is full; UNAVAILABLE when the pool has
// stopped. On failure the request has left the table and the driver never runs. `keep_alive` is
// held until the driver has finished (e.g. the sink, when nothing else owns it).
absl::Status LaunchDriver(const GenerateEnv& env, std::shared_ptr<RequestDriver> driver,
                          std::shared_ptr<void> keep_alive = nullptr);

}  // namespace baton::router

#endif  // BATON_ROUTER_REQUEST_ADMISSION_H_
