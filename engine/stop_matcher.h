// Incremental stop-string detection over streamed text.
//
// Generated text arrives piece by piece (one detokenized token at a time). StopMatcher passes it
// on while making sure the client never sees any part of a stop string:
//   - the longest tail of the text that could still become the start of a stop string is held
//     back until the following pieces decide it;
//   - at the first stop string to occur, the text is cut: what precedes the match is emitted, the
//     stop string and everything after it are dropped, and the matcher reports `stopped` from
//     then on. "First to occur" means the match that ends earliest (then the one that starts
//     earliest, then the first listed): where a stream fed byte by byte would stop. So the
//     output depends only on the text, never on how it was cut into pieces; e.g. with stop
//     strings {"abcd", "bc"}, "xabcd" gives "xa" however it arrives.
// A stop string may span any number of pieces. Matching is on bytes: when the pieces and the
// stop strings are whole UTF-8 (as IncrementalDetokenizer produces), every cut falls between
// characters, so emitted text is whole UTF-8 too.
//
// Thread-safety: thread-compatible; one StopMatcher per stream.
#ifndef BATON_ENGINE_STOP_MATCHER_H_
#define BATON_ENGINE_STOP_MATCHER_H_

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace baton::engine {

class StopMatcher {
 public:
  struct Result {
    std::string emit;      // text safe to send to the client now (may be empty)
    bool stopped = false;  // a stop string matched; nothing further will be emitted
  };

  // Empty strings in `stop_strings` are ignored (ValidateSamplingParams rejects them anyway).
  // With no stop strings every piece is emitted as it arrives.
  explicit StopMatcher(std::vector<std::string> stop_strings);

  // Adds the next piece of text. After a stop, returns {"", true} and ignores the text.
  Result Feed(std::string_view new_text);

  // End of generation: returns the held-back text (empty after a stop) and clears it.
  std::string Flush();

  bool stopped() const { return matched_stop_ >= 0; }
  // Index in stop_strings of the string that stopped the stream; -1 while not stopped.
  int matched_stop() const { return matched_stop_; }
  // Bytes currently held back.
  size_t held_size() const { return held_.size(); }

 private:
  // Length of the longest tail of `text` that is a proper prefix of some stop string.
  size_t LongestPartialMatch(std::string_view text) const;

  std::vector<std::string> stop_strings_;
  std::string held_;
  int matched_stop_ = -1;
};

}  // namespace baton::engine

#endif  // BATON_ENGINE_STOP_MATCHER_H_
