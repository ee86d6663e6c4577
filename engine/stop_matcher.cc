#include "engine/stop_matcher.h"

#include <algorithm>
#include <utility>

namespace baton::engine {

StopMatcher::StopMatcher(std::vector<std::string> stop_strings)
    : stop_strings_(std::move(stop_strings)) {}

StopMatcher::Result StopMatcher::Feed(std::string_view new_text) {
  if (stopped()) return {.emit = "", .stopped = true};
  held_.append(new_text);

  // The match that ends first (then the one that starts first, then the first listed): the
  // place where generation fed one byte at a time would have stopped, so the result does not
  // depend on how the text was cut into pieces. A match that began in text already emitted is
  // impossible: its start would have been part of a partial match, and held.
  size_t match_pos = std::string::npos;
  size_t match_end = std::string::npos;
  for (size_t i = 0; i < stop_strings_.size(); ++i) {
    const std::string& stop = stop_strings_[i];
    if (stop.empty()) continue;
    const size_t pos = held_.find(stop);
    if (pos == std::string::npos) continue;
    const size_t end = pos + stop.size();
    if (end < match_end || (end == match_end && pos < match_pos)) {
      match_pos = pos;
      match_end = end;
      matched_stop_ = static_cast<int>(i);
    }
  }
  if (match_pos != std::string::npos) {
    held_.resize(match_pos);
    Result result{.emit = std::move(held_), .stopped = true};
    held_.clear();
    return result;
  }

  const size_t n_hold = LongestPartialMatch(held_);
  Result result{.emit = held_.substr(0, held_.size() - n_hold), .stopped = false};
  held_.erase(0, held_.size() - n_hold);
  return result;
}

std::string StopMatcher::Flush() {
  std::string rest = std::move(held_);
  held_.clear();
  return rest;
}

size_t StopMatcher::LongestPartialMatch(std::string_view text) const {
  size_t longest = 0;
  for (const std::string& stop : stop_strings_) {
    // Proper prefixes only: a whole stop string would already have matched.
    const size_t max_len = std::min(text.size(), stop.empty() ? 0 : stop.size() - 1);
    for (size_t len = max_len; len > longest; --len) {
      if (text.substr(text.size() - len) == std::string_view(stop).substr(0, len)) {
        longest = len;
        break;
      }
    }
  }
  return longest;
}

}  // namespace baton::engine
