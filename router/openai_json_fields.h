// Reading the fields of an OpenAI request body: absent-or-null as "not given", and
// INVALID_ARGUMENT errors that name the field (its `param`, as OpenAI's error objects do).
//
// Thread-safety: pure functions.
#ifndef BATON_ROUTER_OPENAI_JSON_FIELDS_H_
#define BATON_ROUTER_OPENAI_JSON_FIELDS_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"
#include "router/http_errors.h"

namespace baton::router {

// INVALID_ARGUMENT with `message`, naming `param`.
inline absl::Status Invalid(absl::string_view param, absl::string_view message) {
  return WithParam(absl::InvalidArgumentError(message), param);
}

// INVALID_ARGUMENT: "<what> is not supported by this server", naming `param`.
inline absl::Status Unsupported(absl::string_view param, absl::string_view what) {
  return Invalid(param, absl::StrCat(what, " is not supported by this server"));
}

// The field, or nullptr when it is absent or null (OpenAI treats both as "not given").
inline const nlohmann::ordered_json* Field(const nlohmann::ordered_json& object, const char* name) {
  auto it = object.find(name);
  if (it == object.end() || it->is_null()) return nullptr;
  return &*it;
}

inline const char* TypeName(const nlohmann::ordered_json& value) { return value.type_name(); }

inline absl::StatusOr<bool> Bool(const nlohmann::ordered_json& value, absl::string_view param) {
  if (!value.is_boolean()) {
    return Invalid(param, absl::StrCat("'", param, "' must be a boolean, got ", TypeName(value)));
  }
  return value.get<bool>();
}

}  // namespace baton::router

#endif  // BATON_ROUTER_OPENAI_JSON_FIELDS_H_
