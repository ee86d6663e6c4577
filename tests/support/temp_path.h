// A temporary directory per test process, for the files tests write.
//
// Thread-safety: TempPath is thread-safe.
#ifndef BATON_TESTS_SUPPORT_TEMP_PATH_H_
#define BATON_TESTS_SUPPORT_TEMP_PATH_H_

#include <string>

namespace baton::test_support {

// The path of `name` in this test process's own temporary directory (under $TEST_TMPDIR, else the
// system's), which is removed with its contents when the process exits.
std::string TempPath(const std::string& name);

// Writes `text` to TempPath(name) and returns that path.
std::string WriteTempFile(const std::string& name, const std::string& text);

}  // namespace baton::test_support

#endif  // BATON_TESTS_SUPPORT_TEMP_PATH_H_
