// The process log: its line format, one line per event, and level filtering.
#include "base/log.h"

#include <fcntl.h>
#include <unistd.h>

#include <fstream>
#include <regex>
#include <sstream>
#include <string>

#include "gtest/gtest.h"
#include "tests/support/temp_path.h"

namespace baton {
namespace {

// Runs `log` with stderr redirected to a file; returns what was written.
template <typename F>
std::string CaptureStderr(F log) {
  const std::string path = test_support::TempPath("log-test.txt");
  const int file = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  const int saved = dup(STDERR_FILENO);
  dup2(file, STDERR_FILENO);
  log();
  dup2(saved, STDERR_FILENO);
  close(saved);
  close(file);
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(LogTest, OneTimestampedLineWithLevelTagAndPid) {
  SetLogTag("router");
  SetLogLevel(LogLevel::kInfo);
  const std::string out = CaptureStderr([] { BATON_LOG(WARNING) << "two\nlines " << 42; });
  const std::regex line(
      R"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z W router\[)" + std::to_string(getpid()) +
      R"(\] two lines 42\n)");
  EXPECT_TRUE(std::regex_match(out, line)) << out;
}

TEST(LogTest, LevelsBelowTheProcessLevelAreSkippedWithoutFormatting) {
  SetLogLevel(LogLevel::kWarning);
  int formatted = 0;
  auto count = [&formatted] { return ++formatted; };
  const std::string out = CaptureStderr([&] {
    BATON_LOG(INFO) << "hidden " << count();
    BATON_LOG(ERROR) << "shown " << count();
  });
  EXPECT_EQ(formatted, 1);
  EXPECT_EQ(out.find("hidden"), std::string::npos);
  EXPECT_NE(out.find(" E "), std::string::npos) << out;
  SetLogLevel(LogLevel::kInfo);
}

TEST(LogTest, ParseLogLevel) {
  absl::StatusOr<LogLevel> debug = ParseLogLevel("debug");
  ASSERT_TRUE(debug.ok());
  EXPECT_EQ(*debug, LogLevel::kDebug);
  absl::StatusOr<LogLevel> bad = ParseLogLevel("loud");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("debug, info, warning, error"), std::string::npos);
}

}  // namespace
}  // namespace baton
