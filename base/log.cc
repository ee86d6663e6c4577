#include "base/log.h"

#include <unistd.h>

#include <atomic>
#include <cerrno>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace baton {
namespace {

std::atomic<int> g_level{static_cast<int>(LogLevel::kInfo)};

absl::Mutex& TagMutex() {
  static absl::Mutex* const mu = new absl::Mutex();
  return *mu;
}

std::string& Tag() {
  static std::string* const tag = new std::string("baton");
  return *tag;
}

char LevelLetter(LogLevel level) {
  switch (level) {
    case LogLevel::kDebug:
      return 'D';
    case LogLevel::kInfo:
      return 'I';
    case LogLevel::kWarning:
      return 'W';
    case LogLevel::kError:
      return 'E';
  }
  return '?';
}

// Writes all of `line` to stderr, retrying on EINTR and short writes.
void WriteLine(const std::string& line) {
  size_t done = 0;
  while (done < line.size()) {
    const ssize_t n = ::write(STDERR_FILENO, line.data() + done, line.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    done += static_cast<size_t>(n);
  }
}

}  // namespace

absl::StatusOr<LogLevel> ParseLogLevel(absl::string_view name) {
  if (name == "debug") return LogLevel::kDebug;
  if (name == "info") return LogLevel::kInfo;
  if (name == "warning") return LogLevel::kWarning;
  if (name == "error") return LogLevel::kError;
  return absl::InvalidArgumentError(
      absl::StrCat("log level '", name, "' is not one of debug, info, warning, error"));
}

void SetLogLevel(LogLevel level) { g_level.store(static_cast<int>(level)); }

void SetLogTag(std::string tag) {
  absl::MutexLock lock(&TagMutex());
  Tag() = std::move(tag);
}

bool LogEnabled(LogLevel level) { return static_cast<int>(level) >= g_level.load(); }

LogMessage::~LogMessage() {
  std::string tag;
  {
    absl::MutexLock lock(&TagMutex());
    tag = Tag();
  }
  std::string text = stream_.str();
  for (char& c : text) {
    if (c == '\n') c = ' ';  // one event, one line
  }
  WriteLine(absl::StrCat(absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", absl::Now(), absl::UTCTimeZone()),
                         " ", std::string(1, LevelLetter(level_)), " ", tag, "[", getpid(), "] ",
                         text, "\n"));
}

}  // namespace baton
