#include "engine/stop_matcher.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace baton::engine {
namespace {

// Feeds `pieces` in order and returns everything emitted (Flush included unless stopped), plus
// whether it stopped.
struct Streamed {
  std::string text;
  bool stopped = false;
};

Streamed Stream(StopMatcher& matcher, const std::vector<std::string>& pieces) {
  Streamed out;
  for (const std::string& piece : pieces) {
    StopMatcher::Result result = matcher.Feed(piece);
    out.text += result.emit;
    if (result.stopped) {
      out.stopped = true;
      break;
    }
  }
  out.text += matcher.Flush();
  return out;
}

Streamed Stream(const std::vector<std::string>& stops, const std::vector<std::string>& pieces) {
  StopMatcher matcher(stops);
  return Stream(matcher, pieces);
}

// `text` as single-byte pieces.
std::vector<std::string> Bytes(const std::string& text) {
  std::vector<std::string> pieces;
  for (char c : text) pieces.emplace_back(1, c);
  return pieces;
}

TEST(StopMatcherTest, NoStopStringsPassesEverythingThrough) {
  StopMatcher matcher({});
  StopMatcher::Result result = matcher.Feed("hello ");
  EXPECT_EQ(result.emit, "hello ");
  EXPECT_FALSE(result.stopped);
  EXPECT_EQ(matcher.Feed("world").emit, "world");
  EXPECT_EQ(matcher.Flush(), "");
}

TEST(StopMatcherTest, NoMatchEmitsEverythingAfterFlush) {
  StopMatcher matcher({"STOP"});
  std::string emitted;
  for (const char* piece : {"all ", "is S", "T", "O"}) {
    const StopMatcher::Result result = matcher.Feed(piece);
    EXPECT_FALSE(result.stopped);
    emitted += result.emit;
  }
  // "STO" could still become "STOP", so it is held.
  EXPECT_EQ(emitted, "all is ");
  EXPECT_EQ(matcher.held_size(), 3u);
  EXPECT_EQ(matcher.Flush(), "STO");
  EXPECT_EQ(matcher.held_size(), 0u);
  EXPECT_FALSE(matcher.stopped());
  EXPECT_EQ(matcher.matched_stop(), -1);
}

TEST(StopMatcherTest, HeldTextIsReleasedWhenThePrefixBreaks) {
  StopMatcher matcher({"STOP"});
  EXPECT_EQ(matcher.Feed("x ST").emit, "x ");
  EXPECT_EQ(matcher.Feed("A").emit, "STA");
  EXPECT_EQ(matcher.held_size(), 0u);
}

TEST(StopMatcherTest, StopWithinOnePiece) {
  StopMatcher matcher({"</s>"});
  const StopMatcher::Result result = matcher.Feed("answer</s>trailing");
  EXPECT_EQ(result.emit, "answer");
  EXPECT_TRUE(result.stopped);
  EXPECT_TRUE(matcher.stopped());
  EXPECT_EQ(matcher.matched_stop(), 0);
  // Nothing more after a stop.
  const StopMatcher::Result after = matcher.Feed("more");
  EXPECT_EQ(after.emit, "");
  EXPECT_TRUE(after.stopped);
  EXPECT_EQ(matcher.Flush(), "");
}

TEST(StopMatcherTest, StopAcrossChunkBoundaries) {
  StopMatcher matcher({"<|end|>"});
  std::string emitted;
  StopMatcher::Result result = matcher.Feed("The answer is 42.<|");
  emitted += result.emit;
  EXPECT_EQ(emitted, "The answer is 42.");
  EXPECT_FALSE(result.stopped);
  result = matcher.Feed("en");
  EXPECT_EQ(result.emit, "");
  EXPECT_FALSE(result.stopped);
  result = matcher.Feed("d|> ignored");
  EXPECT_EQ(result.emit, "");
  EXPECT_TRUE(result.stopped);
}

TEST(StopMatcherTest, StopSpanningManySingleBytePieces) {
  const Streamed out = Stream({"\n\nUser:"}, Bytes("Sure, here it is.\n\nUser: next"));
  EXPECT_EQ(out.text, "Sure, here it is.");
  EXPECT_TRUE(out.stopped);
}

TEST(StopMatcherTest, OverlappingPrefixes) {
  // "aababab": the first "abab" starts at index 1.
  EXPECT_EQ(Stream({"abab"}, {"aababab"}).text, "a");
  EXPECT_EQ(Stream({"abab"}, Bytes("aababab")).text, "a");
  EXPECT_EQ(Stream({"abab"}, {"aab", "aba", "b"}).text, "a");
  EXPECT_EQ(Stream({"abab"}, {"a", "aba", "bab"}).text, "a");
  // A partial match that fails ("aba" then "b") must not hide the overlapping one that succeeds.
  EXPECT_EQ(Stream({"abac"}, Bytes("xababac!")).text, "xab");
  const Streamed no_stop = Stream({"abab"}, Bytes("aabax"));
  EXPECT_EQ(no_stop.text, "aabax");
  EXPECT_FALSE(no_stop.stopped);
}

TEST(StopMatcherTest, NeverEmitsAnyPartOfAStopString) {
  // Whatever the chunking, the emitted text is exactly the text before the first stop.
  const std::string text = "one two thr three four";
  const std::vector<std::string> stops = {"three", "four"};
  for (size_t split_a = 0; split_a <= text.size(); ++split_a) {
    for (size_t split_b = split_a; split_b <= text.size(); ++split_b) {
      StopMatcher matcher(stops);
      std::string emitted;
      bool stopped = false;
      for (const std::string& piece :
           {text.substr(0, split_a), text.substr(split_a, split_b - split_a),
            text.substr(split_b)}) {
        const StopMatcher::Result result = matcher.Feed(piece);
        emitted += result.emit;
        // Whatever was emitted so far is a prefix of the final answer.
        ASSERT_EQ(emitted, std::string("one two thr ").substr(0, emitted.size()));
        if (result.stopped) {
          stopped = true;
          break;
        }
      }
      EXPECT_TRUE(stopped);
      EXPECT_EQ(emitted, "one two thr ") << "splits " << split_a << ", " << split_b;
      EXPECT_EQ(matcher.matched_stop(), 0);
    }
  }
}

TEST(StopMatcherTest, EarliestMatchWinsAmongSeveral) {
  StopMatcher matcher({"world", "lo w", "xyz"});
  const StopMatcher::Result result = matcher.Feed("hello world");
  EXPECT_EQ(result.emit, "hel");
  EXPECT_TRUE(result.stopped);
  EXPECT_EQ(matcher.matched_stop(), 1);
}

TEST(StopMatcherTest, TheMatchThatEndsFirstWins) {
  // "bc" completes before "abcd" could, so the stream stops there, however the text arrives.
  for (const std::vector<std::string>& pieces : std::vector<std::vector<std::string>>{
           {"xabcd"}, {"xa", "bc", "d"}, {"xab", "cd"}, Bytes("xabcd")}) {
    StopMatcher matcher({"abcd", "bc"});
    const Streamed out = Stream(matcher, pieces);
    EXPECT_EQ(out.text, "xa");
    EXPECT_TRUE(out.stopped);
    EXPECT_EQ(matcher.matched_stop(), 1);
  }
}

TEST(StopMatcherTest, SameEndLongerMatchWins) {
  // "bc" and "abc" end together; the longer one starts earlier and cuts more.
  StopMatcher matcher({"bc", "abc"});
  EXPECT_EQ(matcher.Feed("zabcq").emit, "z");
  EXPECT_EQ(matcher.matched_stop(), 1);
}

TEST(StopMatcherTest, IdenticalStopStringsFirstListedWins) {
  StopMatcher matcher({"xyz", "ab", "ab"});
  EXPECT_EQ(matcher.Feed("zab").emit, "z");
  EXPECT_EQ(matcher.matched_stop(), 1);
}

TEST(StopMatcherTest, OutputDoesNotDependOnChunking) {
  // Every text over {a, b, c} up to length 7, whole, in single bytes, and in pieces of two and
  // three bytes: all must agree, and the cut must sit right before an occurring stop string.
  const std::vector<std::string> stops = {"abca", "bc", "cab", "aaa"};
  auto cut = [](const std::string& text, size_t size) {
    std::vector<std::string> pieces;
    for (size_t i = 0; i < text.size(); i += size) pieces.push_back(text.substr(i, size));
    return pieces;
  };
  std::vector<std::string> texts = {""};
  for (int length = 1; length <= 7; ++length) {
    std::vector<std::string> longer;
    for (const std::string& t : texts) {
      for (char c : {'a', 'b', 'c'}) longer.push_back(t + c);
    }
    texts = longer;
    for (const std::string& text : texts) {
      const Streamed whole = Stream(stops, {text});
      for (size_t size : {1, 2, 3}) {
        const Streamed pieces = Stream(stops, cut(text, size));
        ASSERT_EQ(pieces.text, whole.text) << text << " in pieces of " << size;
        ASSERT_EQ(pieces.stopped, whole.stopped) << text << " in pieces of " << size;
      }
      if (!whole.stopped) {
        ASSERT_EQ(whole.text, text);
      } else {
        bool found = false;
        for (const std::string& stop : stops) {
          found |= text.compare(whole.text.size(), stop.size(), stop) == 0;
        }
        ASSERT_TRUE(found) << text;
      }
    }
  }
}

TEST(StopMatcherTest, HoldsTheLongestPossiblePrefixAcrossStrings) {
  StopMatcher matcher({"xyz", "yzw!"});
  // "yz" is a prefix of "yzw!" only; hold 2, then 3, then release all when "?" breaks it.
  EXPECT_EQ(matcher.Feed("ayz").emit, "a");
  EXPECT_EQ(matcher.held_size(), 2u);
  EXPECT_EQ(matcher.Feed("w").emit, "");
  EXPECT_EQ(matcher.held_size(), 3u);
  EXPECT_EQ(matcher.Feed("?").emit, "yzw?");
}

TEST(StopMatcherTest, Utf8MultibytePieces) {
  // Stop string "世界" (6 bytes) arriving split inside characters.
  const std::string text = "你好世界!";
  EXPECT_EQ(Stream({"世界"}, Bytes(text)).text, "你好");
  EXPECT_EQ(Stream({"世界"}, {"你好世", "界!"}).text, "你好");
  EXPECT_EQ(Stream({"世界"}, {"你好\xE4\xB8", "\x96\xE7\x95\x8C"}).text, "你好");

  // A character sharing its lead bytes with the stop string's first character is held only
  // while it could match, and is released whole.
  StopMatcher matcher({"é!"});
  EXPECT_EQ(matcher.Feed("caf\xC3").emit, "caf");
  EXPECT_EQ(matcher.Feed("\xA9").emit, "");   // "é" held: could be "é!"
  EXPECT_EQ(matcher.Feed(" ").emit, "é ");
  EXPECT_EQ(matcher.Feed("è").emit, "è");    // C3 A8 does not start "é!"

  const Streamed no_stop = Stream({"日本"}, {"日", "曜日"});
  EXPECT_EQ(no_stop.text, "日曜日");
  EXPECT_FALSE(no_stop.stopped);
}

TEST(StopMatcherTest, StopAtTheVeryStart) {
  const Streamed out = Stream({"###"}, {"#", "##", "tail"});
  EXPECT_EQ(out.text, "");
  EXPECT_TRUE(out.stopped);
}

TEST(StopMatcherTest, EmptyStopStringsAreIgnored) {
  const Streamed out = Stream({"", "END"}, {"abc", "EN", "D"});
  EXPECT_EQ(out.text, "abc");
  EXPECT_TRUE(out.stopped);
}

}  // namespace
}  // namespace baton::engine
