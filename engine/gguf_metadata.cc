#include "engine/gguf_metadata.h"

#include <cmath>
#include <limits>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "engine/gguf_file.h"

namespace baton::engine {
namespace {

// An unsigned integer key in [least, INT32_MAX].
absl::StatusOr<int32_t> RequiredInt32(const GgufFile& file, const std::string& key,
                                      uint64_t least) {
  absl::StatusOr<uint64_t> value = file.GetUint(key);
  if (!value.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(file.path(), ": model metadata: ", value.status().message()));
  }
  if (*value < least || *value > static_cast<uint64_t>(std::numeric_limits<int32_t>::max())) {
    return absl::InvalidArgumentError(
        absl::StrCat(file.path(), ": model metadata: '", key, "' = ", *value, " is out of range"));
  }
  return static_cast<int32_t>(*value);
}

}  // namespace

absl::StatusOr<int32_t> RequiredPositive(const GgufFile& file, const std::string& key) {
  return RequiredInt32(file, key, 1);
}

absl::StatusOr<int32_t> OptionalPositive(const GgufFile& file, const std::string& key,
                                         int32_t fallback) {
  if (file.Find(key) == nullptr) return fallback;
  return RequiredPositive(file, key);
}

absl::StatusOr<int32_t> OptionalCount(const GgufFile& file, const std::string& key,
                                      int32_t fallback) {
  if (file.Find(key) == nullptr) return fallback;
  return RequiredInt32(file, key, 0);
}

absl::StatusOr<float> OptionalPositiveFloat(const GgufFile& file, const std::string& key,
                                            float fallback) {
  if (file.Find(key) == nullptr) return fallback;
  absl::StatusOr<double> d = file.GetFloat(key);
  if (!d.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(file.path(), ": model metadata: ", d.status().message()));
  }
  if (!std::isfinite(*d) || *d <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(file.path(), ": model metadata: '", key, "' = ", *d, " must be positive"));
  }
  return static_cast<float>(*d);
}

}  // namespace baton::engine
