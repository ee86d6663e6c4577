#include "tests/support/temp_path.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <unistd.h>

#include "absl/log/check.h"
#include "absl/strings/str_cat.h"

namespace baton::test_support {

std::string TempPath(const std::string& name) {
  // One directory per test process, made on first use and removed with everything in it when the
  // process exits (a crashed test leaves it behind, for a look).
  static const std::filesystem::path* const dir = [] {
    const char* root = std::getenv("TEST_TMPDIR");
    const std::filesystem::path base =
        root != nullptr ? root : std::filesystem::temp_directory_path();
    std::string pattern = (base / absl::StrCat("baton-test-", ::getpid(), "-XXXXXX")).string();
    CHECK(::mkdtemp(pattern.data()) != nullptr) << "mkdtemp " << pattern << ": "
                                                << std::strerror(errno);
    static const std::filesystem::path made = pattern;
    std::atexit([] {
      std::error_code ignored;
      std::filesystem::remove_all(made, ignored);
    });
    return &made;
  }();
  return (*dir / name).string();
}

std::string WriteTempFile(const std::string& name, const std::string& text) {
  const std::string path = TempPath(name);
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

}  // namespace baton::test_support
