// Process logs: one line per event on stderr, "TIME LEVEL TAG[PID] message", written with a
// single write(2) so that the lines of processes sharing a terminal or pipe (`baton up` and its
// children) never interleave mid-line. Levels below the process's level are skipped without
// formatting anything.
//
//   BATON_LOG(INFO) << "request " << id << " finished";
//
// Thread-safety: thread-safe. SetLogLevel/SetLogTag are meant for start-up (main) and tests.
#ifndef BATON_BASE_LOG_H_
#define BATON_BASE_LOG_H_

#include <sstream>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace baton {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarning = 2, kError = 3 };

// "debug", "info", "warning", "error"; INVALID_ARGUMENT listing them otherwise.
absl::StatusOr<LogLevel> ParseLogLevel(absl::string_view name);
void SetLogLevel(LogLevel level);  // default kInfo
// What names this process in its lines: "router", "decode", ... (default "baton").
void SetLogTag(std::string tag);
bool LogEnabled(LogLevel level);

// One line, written when the message is destroyed.
class LogMessage {
 public:
  explicit LogMessage(LogLevel level) : level_(level) {}
  LogMessage(const LogMessage&) = delete;
  LogMessage& operator=(const LogMessage&) = delete;
  ~LogMessage();
  std::ostream& stream() { return stream_; }

 private:
  const LogLevel level_;
  std::ostringstream stream_;
};

// The names BATON_LOG takes.
namespace log_severity {
inline constexpr LogLevel DEBUG = LogLevel::kDebug;
inline constexpr LogLevel INFO = LogLevel::kInfo;
inline constexpr LogLevel WARNING = LogLevel::kWarning;
inline constexpr LogLevel ERROR = LogLevel::kError;
}  // namespace log_severity

}  // namespace baton

#define BATON_LOG(level)                                          \
  if (!::baton::LogEnabled(::baton::log_severity::level)) {       \
  } else                                                          \
    ::baton::LogMessage(::baton::log_severity::level).stream()

#endif  // BATON_BASE_LOG_H_
