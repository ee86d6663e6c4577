// Errors of the OpenAI-compatible HTTP API: the one mapping from baton's absl::Status codes to an
// HTTP status and an OpenAI error object
//
//   {"error": {"message": "...", "type": "invalid_request_error", "param": "temperature",
//              "code": null}}
//
// INVALID_ARGUMENT, OUT_OF_RANGE, FAILED_PRECONDITION, ALREADY_EXISTS -> 400
// invalid_request_error; UNAUTHENTICATED -> 401; PERMISSION_DENIED -> 403; NOT_FOUND -> 404;
// RESOURCE_EXHAUSTED (router queue full, no KV room) -> 429; UNAVAILABLE (worker down, router
// shutting down) and CANCELLED (cancelled by the server) -> 503; DEADLINE_EXCEEDED -> 504;
// anything else -> 500.
//
// A status may name the offending request field and an OpenAI error code ("model_not_found")
// through payloads set with WithParam() / WithErrorCode(); they become "param" and "code".
//
// Thread-safety: pure functions.
#ifndef BATON_ROUTER_HTTP_ERRORS_H_
#define BATON_ROUTER_HTTP_ERRORS_H_

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"

namespace baton::router {

struct HttpError {
  int http_status = 500;
  std::string type;     // "invalid_request_error", "rate_limit_error", ...
  std::string message;
  std::string param;    // "" -> null
  std::string code;     // "" -> null
};

// The one mapping (see the header comment). `status` must not be OK.
HttpError HttpErrorFromStatus(const absl::Status& status);

// {"error": {"message", "type", "param", "code"}}
nlohmann::ordered_json HttpErrorJson(const HttpError& error);

// `status` with the request field it is about ("temperature", "messages[1].content").
absl::Status WithParam(absl::Status status, absl::string_view param);
// `status` with an OpenAI error code ("model_not_found").
absl::Status WithErrorCode(absl::Status status, absl::string_view code);

}  // namespace baton::router

#endif  // BATON_ROUTER_HTTP_ERRORS_H_
