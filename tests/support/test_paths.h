// Paths of files in the source tree, for tests.
//
// Thread-safety: pure functions.
#ifndef BATON_TESTS_SUPPORT_TEST_PATHS_H_
#define BATON_TESTS_SUPPORT_TEST_PATHS_H_

#include <string>
#include <string_view>

namespace baton::test_support {

// BATON_SOURCE_DIR + "/" + rel.
std::string SourcePath(std::string_view rel);

// The default model (SmolLM2-135M-Instruct, Q4_1) under models/ in the source tree.
std::string DefaultModelPath();

}  // namespace baton::test_support

#endif  // BATON_TESTS_SUPPORT_TEST_PATHS_H_
