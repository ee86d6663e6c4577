#include "bench/sse_parser.h"

namespace baton::bench {

void SseParser::EndLine(std::vector<std::string>& events) {
  if (line_.empty()) {  // a blank line dispatches the event
    if (has_data_) events.push_back(std::move(data_));
    data_.clear();
    has_data_ = false;
    return;
  }
  absl::string_view line = line_;
  if (line.front() != ':') {
    const size_t colon = line.find(':');
    const absl::string_view field = line.substr(0, colon);
    absl::string_view value =
        colon == absl::string_view::npos ? absl::string_view() : line.substr(colon + 1);
    if (!value.empty() && value.front() == ' ') value.remove_prefix(1);
    if (field == "data") {
      if (has_data_) data_ += '\n';
      data_.append(value.data(), value.size());
      has_data_ = true;
    }
  }
  line_.clear();
}

std::vector<std::string> SseParser::Feed(absl::string_view bytes) {
  std::vector<std::string> events;
  for (char c : bytes) {
    if (c == '\n') {
      if (after_cr_) {  // the "\n" of "\r\n": the line already ended
        after_cr_ = false;
        continue;
      }
      EndLine(events);
    } else if (c == '\r') {
      after_cr_ = true;
      EndLine(events);
      continue;
    } else {
      line_ += c;
    }
    after_cr_ = false;
  }
  return events;
}

}  // namespace baton::bench
