// Whole small files read at load (config.json, tokenizer.json, a chat template), with errors that
// name the file.
//
// Thread-safety: pure functions of the files.
#ifndef BATON_ENGINE_JSON_FILE_H_
#define BATON_ENGINE_JSON_FILE_H_

#include <string>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace baton::engine {

// The file's bytes; NOT_FOUND "PATH: cannot open" when it cannot be read.
absl::StatusOr<std::string> ReadWholeFile(const std::string& path);

// The file as a JSON object; NOT_FOUND as ReadWholeFile, INVALID_ARGUMENT "PATH: not valid JSON"
// or "PATH: not a JSON object".
absl::StatusOr<nlohmann::json> ReadJsonObjectFile(const std::string& path);

}  // namespace baton::engine

#endif  // BATON_ENGINE_JSON_FILE_H_
