#include "tests/support/test_paths.h"

#include "absl/strings/str_cat.h"

namespace baton::test_support {

std::string SourcePath(std::string_view rel) {
  return absl::StrCat(BATON_SOURCE_DIR, "/", absl::string_view(rel.data(), rel.size()));
}

std::string DefaultModelPath() { return SourcePath("models/SmolLM2-135M-Instruct.Q4_1.gguf"); }

}  // namespace baton::test_support
