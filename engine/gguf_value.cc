#include "engine/gguf_value.h"

#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace baton::engine {
namespace {

constexpr size_t kMaxDebugStringChars = 80;

// Debian 12's Abseil has its own string_view type, which std::string_view does not convert to.
absl::string_view Sv(std::string_view s) { return absl::string_view(s.data(), s.size()); }

void AppendQuoted(std::string_view s, std::string* out) {
  out->push_back('"');
  size_t n = std::min(s.size(), kMaxDebugStringChars);
  // Cut at a UTF-8 character boundary.
  while (n < s.size() && n > 0 && (static_cast<unsigned char>(s[n]) & 0xc0) == 0x80) --n;
  for (size_t i = 0; i < n; ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    switch (c) {
      case '"':
        out->append("\\\"");
        break;
      case '\\':
        out->append("\\\\");
        break;
      case '\n':
        out->append("\\n");
        break;
      case '\t':
        out->append("\\t");
        break;
      case '\r':
        out->append("\\r");
        break;
      default:
        if (c < 0x20 || c == 0x7f) {
          absl::StrAppendFormat(out, "\\x%02x", c);
        } else {
          out->push_back(static_cast<char>(c));  // UTF-8 passes through
        }
    }
  }
  out->push_back('"');
  if (s.size() > n) absl::StrAppend(out, "... (", s.size(), " bytes)");
}

}  // namespace

std::string_view GgufValueTypeName(GgufValueType type) {
  switch (type) {
    case GgufValueType::kUint8:
      return "uint8";
    case GgufValueType::kInt8:
      return "int8";
    case GgufValueType::kUint16:
      return "uint16";
    case GgufValueType::kInt16:
      return "int16";
    case GgufValueType::kUint32:
      return "uint32";
    case GgufValueType::kInt32:
      return "int32";
    case GgufValueType::kFloat32:
      return "float32";
    case GgufValueType::kBool:
      return "bool";
    case GgufValueType::kString:
      return "string";
    case GgufValueType::kArray:
      return "array";
    case GgufValueType::kUint64:
      return "uint64";
    case GgufValueType::kInt64:
      return "int64";
    case GgufValueType::kFloat64:
      return "float64";
  }
  return "unknown";
}

std::string GgufValue::DebugString(size_t max_array_items) const {
  std::string out;
  if (is_unsigned()) {
    absl::StrAppend(&out, as_unsigned());
  } else if (is_signed()) {
    absl::StrAppend(&out, as_signed());
  } else if (is_float()) {
    absl::StrAppendFormat(&out, "%g", as_float());
  } else if (is_bool()) {
    out = as_bool() ? "true" : "false";
  } else if (is_string()) {
    AppendQuoted(as_string(), &out);
  } else {
    const Array& a = as_array();
    absl::StrAppend(&out, "[");
    const size_t shown = std::min(a.values.size(), max_array_items);
    for (size_t i = 0; i < shown; ++i) {
      if (i > 0) out.append(", ");
      out.append(a.values[i].DebugString(max_array_items));
    }
    if (shown < a.values.size()) absl::StrAppend(&out, shown > 0 ? ", ..." : "...");
    absl::StrAppend(&out, "] (", a.values.size(), " x ", Sv(GgufValueTypeName(a.element_type)),
                    ")");
  }
  return out;
}

}  // namespace baton::engine
