// Server-sent events as an OpenAI-style stream sends them, in arbitrary pieces.
#include "bench/sse_parser.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace baton::bench {
namespace {

using ::testing::ElementsAre;

TEST(SseParserTest, EventsEndAtABlankLine) {
  SseParser p;
  EXPECT_THAT(p.Feed("data: {\"a\":1}\n\ndata: [DONE]\n\n"), ElementsAre("{\"a\":1}", "[DONE]"));
  EXPECT_EQ(p.pending_bytes(), 0u);
}

TEST(SseParserTest, PiecesSplitAnywhereIncludingCrLf) {
  const std::string stream = "data: one\r\n\r\n: keep-alive\r\n\r\ndata:two\r\n\r\n";
  for (size_t cut = 0; cut <= stream.size(); ++cut) {
    SseParser p;
    std::vector<std::string> events = p.Feed(stream.substr(0, cut));
    for (std::string& e : p.Feed(stream.substr(cut))) events.push_back(std::move(e));
    EXPECT_THAT(events, ElementsAre("one", "two")) << "cut at " << cut;
  }
}

TEST(SseParserTest, MultiLineDataAndOtherFields) {
  SseParser p;
  EXPECT_THAT(p.Feed("event: message\nid: 4\ndata: a\ndata: b\nretry: 10\n\n"),
              ElementsAre("a\nb"));
  EXPECT_TRUE(p.Feed("data: incomplete\n").empty());
  EXPECT_GT(p.pending_bytes(), 0u);
  EXPECT_THAT(p.Feed("\n"), ElementsAre("incomplete"));
  EXPECT_TRUE(p.Feed("\n\n: only a comment\n\n").empty());
}

}  // namespace
}  // namespace baton::bench
