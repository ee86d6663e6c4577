// Typed reads of a GGUF file's metadata keys for the model's configuration: each error names the
// file and the key.
//
// Thread-safety: pure functions of an immutable GgufFile.
#ifndef BATON_ENGINE_GGUF_METADATA_H_
#define BATON_ENGINE_GGUF_METADATA_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace baton::engine {

class GgufFile;

// An unsigned integer key in [1, INT32_MAX].
absl::StatusOr<int32_t> RequiredPositive(const GgufFile& file, const std::string& key);
// As RequiredPositive, or `fallback` where the file lacks the key.
absl::StatusOr<int32_t> OptionalPositive(const GgufFile& file, const std::string& key,
                                         int32_t fallback);
// An unsigned integer key in [0, INT32_MAX] (a count that may be none), or `fallback` where the
// file lacks it.
absl::StatusOr<int32_t> OptionalCount(const GgufFile& file, const std::string& key,
                                      int32_t fallback);
// A finite positive float key, or `fallback` where the file lacks it.
absl::StatusOr<float> OptionalPositiveFloat(const GgufFile& file, const std::string& key,
                                            float fallback);

}  // namespace baton::engine

#endif  // BATON_ENGINE_GGUF_METADATA_H_
