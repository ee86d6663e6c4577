// Server-sent events (the text/event-stream format of an OpenAI-style streaming response), parsed
// incrementally as bytes arrive: gives the `data` of each complete event. Lines end in "\n", "\r\n"
// or "\r"; several "data:" lines of one event join with "\n"; comments (":...") and other fields
// (event, id, retry) are skipped.
//
// Thread-compatible.
#ifndef BATON_BENCH_SSE_PARSER_H_
#define BATON_BENCH_SSE_PARSER_H_

#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace baton::bench {

class SseParser {
 public:
  // Feeds bytes; returns the data of every event they complete, in order.
  std::vector<std::string> Feed(absl::string_view bytes);
  // Bytes fed but not yet part of a complete event.
  size_t pending_bytes() const { return line_.size() + data_.size(); }

 private:
  void EndLine(std::vector<std::string>& events);
  std::string line_;
  std::string data_;
  bool has_data_ = false;
  bool after_cr_ = false;
};

}  // namespace baton::bench

#endif  // BATON_BENCH_SSE_PARSER_H_
