#include "router/openai_structured_output.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "router/openai_json_fields.h"

namespace baton::router {
namespace {

using json = nlohmann::ordered_json;

// A JSON schema given as an object, or as JSON text of one (vLLM accepts both).
absl::StatusOr<std::string> SchemaText(const json& schema, const std::string& param) {
  if (schema.is_object()) return schema.dump();
  if (schema.is_string()) return schema.get<std::string>();
  return Invalid(
      param, absl::StrCat("'", param, "' must be a JSON schema object, got ", TypeName(schema)));
}

absl::StatusOr<std::string> String(const json& value, const std::string& param) {
  if (!value.is_string() || value.get_ref<const std::string&>().empty()) {
    return Invalid(param, absl::StrCat("'", param, "' must be a non-empty string"));
  }
  return value.get<std::string>();
}

absl::Status Choices(const json& value, const std::string& param, v1::OutputConstraint& out) {
  if (!value.is_array() || value.empty()) {
    return Invalid(param, absl::StrCat("'", param, "' must be a non-empty array of strings"));
  }
  for (size_t i = 0; i < value.size(); ++i) {
    if (!value[i].is_string()) {
      return Invalid(
          param, absl::StrCat("'", param, "[", i, "]' must be a string, got ", TypeName(value[i])));
    }
    out.mutable_choice()->add_choices(value[i].get<std::string>());
  }
  return absl::OkStatus();
}

// One of vLLM's constraint keys (`key` in structured_outputs, or guided_<key>), named `param`.
absl::Status VllmConstraint(const std::string& key, const json& value, const std::string& param,
                            v1::OutputConstraint& out) {
  if (key == "json") {
    absl::StatusOr<std::string> schema = SchemaText(value, param);
    if (!schema.ok()) return schema.status();
    out.set_json_schema(*std::move(schema));
    out.set_strict(true);  // vLLM compiles schemas strictly
    return absl::OkStatus();
  }
  if (key == "json_object") {
    absl::StatusOr<bool> on = Bool(value, param);
    if (!on.ok()) return on.status();
    if (*on) out.set_json_object(true);
    return absl::OkStatus();
  }
  if (key == "choice") return Choices(value, param, out);
  absl::StatusOr<std::string> text = String(value, param);
  if (!text.ok()) return text.status();
  if (key == "regex") {
    out.set_regex(*std::move(text));
  } else {
    out.set_grammar(*std::move(text));
  }
  return absl::OkStatus();
}

absl::Status ResponseFormat(const json& format, v1::OutputConstraint& out) {
  const json* type = format.is_object() ? Field(format, "type") : nullptr;
  if (type == nullptr || !type->is_string()) {
    return Invalid("response_format",
                   "'response_format.type' must be \"text\", \"json_object\" "
                   "or \"json_schema\"");
  }
  if (*type == "text") return absl::OkStatus();
  if (*type == "json_object") {
    out.set_json_object(true);
    return absl::OkStatus();
  }
  if (*type != "json_schema") {
    return Invalid("response_format",
                   absl::StrCat("'response_format.type' must be \"text\", \"json_object\" or "
                                "\"json_schema\", got \"",
                                type->get<std::string>(), "\""));
  }
  const json* spec = Field(format, "json_schema");
  if (spec == nullptr || !spec->is_object()) {
    return Invalid("response_format.json_schema",
                   "'response_format.json_schema' must be an object with a 'schema'");
  }
  const json* schema = Field(*spec, "schema");
  if (schema == nullptr) {
    return Invalid("response_format.json_schema.schema",
                   "'response_format.json_schema.schema' is required");
  }
  absl::StatusOr<std::string> text = SchemaText(*schema, "response_format.json_schema.schema");
  if (!text.ok()) return text.status();
  out.set_json_schema(*std::move(text));
  if (const json* strict = Field(*spec, "strict")) {
    absl::StatusOr<bool> v = Bool(*strict, "response_format.json_schema.strict");
    if (!v.ok()) return v.status();
    out.set_strict(*v);
  }
  return absl::OkStatus();
}

// Records that `param` set a constraint; INVALID_ARGUMENT when another one did already.
absl::Status OnlyOne(const v1::OutputConstraint& before, const std::string& first,
                     const std::string& param) {
  if (before.kind_case() == v1::OutputConstraint::KIND_NOT_SET) return absl::OkStatus();
  return Invalid(
      param, absl::StrCat("'", param, "' and '", first, "' both constrain the output; give one"));
}

}  // namespace

absl::Status ParseStructuredOutput(const json& body, v1::SamplingParams& sampling) {
  v1::OutputConstraint constraint;
  std::string first;  // the field that set `constraint`
  auto take = [&](const std::string& param, auto parse) -> absl::Status {
    v1::OutputConstraint next;
    if (absl::Status s = parse(next); !s.ok()) return s;
    if (next.kind_case() == v1::OutputConstraint::KIND_NOT_SET) return absl::OkStatus();
    if (absl::Status s = OnlyOne(constraint, first, param); !s.ok()) return s;
    constraint = std::move(next);
    first = param;
    return absl::OkStatus();
  };
  if (const json* format = Field(body, "response_format")) {
    if (absl::Status s = take("response_format",
                              [&](v1::OutputConstraint& c) { return ResponseFormat(*format, c); });
        !s.ok()) {
      return s;
    }
  }
  if (const json* outputs = Field(body, "structured_outputs")) {
    if (!outputs->is_object()) {
      return Invalid("structured_outputs", "'structured_outputs' must be an object");
    }
    for (const auto& [key, value] : outputs->items()) {
      const std::string param = absl::StrCat("structured_outputs.", key);
      if (key != "json" && key != "regex" && key != "choice" && key != "grammar" &&
          key != "json_object") {
        return Invalid(param, absl::StrCat("'", param,
                                           "' is not one of json, regex, choice, "
                                           "grammar, json_object"));
      }
      if (value.is_null()) continue;
      if (absl::Status s = take(
              param, [&](v1::OutputConstraint& c) { return VllmConstraint(key, value, param, c); });
          !s.ok()) {
        return s;
      }
    }
  }
  for (const char* key : {"json", "regex", "choice", "grammar"}) {
    const std::string param = absl::StrCat("guided_", key);
    const json* value = Field(body, param.c_str());
    if (value == nullptr) continue;
    if (absl::Status s = take(
            param, [&](v1::OutputConstraint& c) { return VllmConstraint(key, *value, param, c); });
        !s.ok()) {
      return s;
    }
  }
  if (constraint.kind_case() != v1::OutputConstraint::KIND_NOT_SET) {
    *sampling.mutable_constraint() = std::move(constraint);
  }
  return absl::OkStatus();
}

absl::Status ConstrainToToolCalls(const json& tools, const std::string& function, bool parallel,
                                  v1::SamplingParams& sampling) {
  if (sampling.has_constraint()) {
    return Invalid("tool_choice",
                   "'tool_choice' \"required\" or a named function constrains the "
                   "output to tool calls; it cannot be combined with "
                   "'response_format' or another output constraint");
  }
  json calls = json::array();
  for (const json& tool : tools) {
    const json& spec = tool["function"];
    const std::string name = spec["name"].get<std::string>();
    if (!function.empty() && name != function) continue;
    const json* parameters = Field(spec, "parameters");
    calls.push_back({{"type", "object"},
                     {"properties",
                      {{"name", {{"type", "string"}, {"enum", {name}}}},
                       {"parameters", parameters != nullptr ? *parameters : json::object()}}},
                     {"required", {"name", "parameters"}}});
  }
  if (calls.empty()) {
    return Invalid("tool_choice", absl::StrCat("'tool_choice' names function '", function,
                                               "', which is not among 'tools'"));
  }
  json schema = {{"type", "array"}, {"minItems", 1}, {"items", {{"anyOf", std::move(calls)}}}};
  if (!parallel || !function.empty()) schema["maxItems"] = 1;
  sampling.mutable_constraint()->set_json_schema(schema.dump());
  sampling.mutable_constraint()->set_strict(true);
  return absl::OkStatus();
}

}  // namespace baton::router
