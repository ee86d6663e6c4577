#include "engine/json_file.h"

#include <fstream>
#include <sstream>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace baton::engine {

absl::StatusOr<std::string> ReadWholeFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot open"));
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

absl::StatusOr<nlohmann::json> ReadJsonObjectFile(const std::string& path) {
  absl::StatusOr<std::string> text = ReadWholeFile(path);
  if (!text.ok()) return text.status();
  nlohmann::json json = nlohmann::json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded())
    return absl::InvalidArgumentError(absl::StrCat(path, ": not valid JSON"));
  if (!json.is_object())
    return absl::InvalidArgumentError(absl::StrCat(path, ": not a JSON object"));
  return json;
}

}  // namespace baton::engine
