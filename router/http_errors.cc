#include "router/http_errors.h"

#include <optional>
#include <utility>

#include "absl/strings/cord.h"

namespace baton::router {
namespace {

constexpr absl::string_view kParamUrl = "type.baton.dev/http.param";
constexpr absl::string_view kCodeUrl = "type.baton.dev/http.code";

std::string Payload(const absl::Status& status, absl::string_view url) {
  const auto payload = status.GetPayload(url);  // absl::optional: not std:: in Debian 12
  return payload.has_value() ? std::string(*payload) : std::string();
}

nlohmann::ordered_json NullIfEmpty(const std::string& s) {
  return s.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(s);
}

}  // namespace

HttpError HttpErrorFromStatus(const absl::Status& status) {
  HttpError error;
  error.message = std::string(status.message());
  error.param = Payload(status, kParamUrl);
  error.code = Payload(status, kCodeUrl);
  switch (status.code()) {
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kOutOfRange:
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kAlreadyExists:
      error.http_status = 400;
      error.type = "invalid_request_error";
      break;
    case absl::StatusCode::kUnauthenticated:
      error.http_status = 401;
      error.type = "invalid_request_error";
      if (error.code.empty()) error.code = "invalid_api_key";
      break;
    case absl::StatusCode::kPermissionDenied:
      error.http_status = 403;
      error.type = "invalid_request_error";
      break;
    case absl::StatusCode::kNotFound:
      error.http_status = 404;
      error.type = "invalid_request_error";
      break;
    case absl::StatusCode::kResourceExhausted:
      error.http_status = 429;
      error.type = "rate_limit_error";
      if (error.code.empty()) error.code = "rate_limit_exceeded";
      break;
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kCancelled:
      error.http_status = 503;
      error.type = "service_unavailable_error";
      break;
    case absl::StatusCode::kDeadlineExceeded:
      error.http_status = 504;
      error.type = "timeout_error";
      break;
    default:
      error.http_status = 500;
      error.type = "server_error";
      break;
  }
  if (error.message.empty()) error.message = absl::StatusCodeToString(status.code());
  return error;
}

nlohmann::ordered_json HttpErrorJson(const HttpError& error) {
  return {{"error",
           {{"message", error.message},
            {"type", error.type},
            {"param", NullIfEmpty(error.param)},
            {"code", NullIfEmpty(error.code)}}}};
}

absl::Status WithParam(absl::Status status, absl::string_view param) {
  status.SetPayload(kParamUrl, absl::Cord(param));
  return status;
}

absl::Status WithErrorCode(absl::Status status, absl::string_view code) {
  status.SetPayload(kCodeUrl, absl::Cord(code));
  return status;
}

}  // namespace baton::router
