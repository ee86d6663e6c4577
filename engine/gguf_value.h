// A GGUF metadata value: a scalar, a string, or an array of values (arrays may nest).
//
// Thread-safety: a plain value type; const access is safe from any thread.
#ifndef BATON_ENGINE_GGUF_VALUE_H_
#define BATON_ENGINE_GGUF_VALUE_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace baton::engine {

// GGUF's gguf_metadata_value_type ids.
enum class GgufValueType : uint32_t {
  kUint8 = 0,
  kInt8 = 1,
  kUint16 = 2,
  kInt16 = 3,
  kUint32 = 4,
  kInt32 = 5,
  kFloat32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kUint64 = 10,
  kInt64 = 11,
  kFloat64 = 12,
};

std::string_view GgufValueTypeName(GgufValueType type);

class GgufValue {
 public:
  struct Array {
    GgufValueType element_type;
    std::vector<GgufValue> values;
  };

  GgufValue() = default;
  static GgufValue Uint(GgufValueType type, uint64_t v) { return GgufValue(type, v); }
  static GgufValue Int(GgufValueType type, int64_t v) { return GgufValue(type, v); }
  static GgufValue Float(GgufValueType type, double v) { return GgufValue(type, v); }
  static GgufValue Bool(bool v) { return GgufValue(GgufValueType::kBool, v); }
  static GgufValue String(std::string v) { return GgufValue(GgufValueType::kString, std::move(v)); }
  static GgufValue MakeArray(Array a) { return GgufValue(GgufValueType::kArray, std::move(a)); }

  GgufValueType type() const { return type_; }
  bool is_unsigned() const { return std::holds_alternative<uint64_t>(v_); }
  bool is_signed() const { return std::holds_alternative<int64_t>(v_); }
  bool is_float() const { return std::holds_alternative<double>(v_); }
  bool is_bool() const { return std::holds_alternative<bool>(v_); }
  bool is_string() const { return std::holds_alternative<std::string>(v_); }
  bool is_array() const { return std::holds_alternative<Array>(v_); }

  // Accessors: programmer error to call the wrong one (check the type first).
  uint64_t as_unsigned() const { return std::get<uint64_t>(v_); }
  int64_t as_signed() const { return std::get<int64_t>(v_); }
  double as_float() const { return std::get<double>(v_); }
  bool as_bool() const { return std::get<bool>(v_); }
  const std::string& as_string() const { return std::get<std::string>(v_); }
  const Array& as_array() const { return std::get<Array>(v_); }

  // Short human-readable rendering (arrays abbreviated), for `baton info`.
  std::string DebugString(size_t max_array_items = 8) const;

 private:
  template <typename T>
  GgufValue(GgufValueType type, T v) : type_(type), v_(std::move(v)) {}

  GgufValueType type_ = GgufValueType::kUint8;
  std::variant<uint64_t, int64_t, double, bool, std::string, Array> v_;
};

}  // namespace baton::engine

#endif  // BATON_ENGINE_GGUF_VALUE_H_
