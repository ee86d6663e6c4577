// The requests of a load: JSONL datasets, synthetic prompts and their length calibration.
#include "bench/serve_workload.h"

#include "absl/strings/str_split.h"
#include "gtest/gtest.h"

namespace baton::bench {
namespace {

TEST(DatasetTest, ParsesPromptsAndMaxTokens) {
  absl::StatusOr<std::vector<ServeRequest>> d = ParseJsonlDataset(
      "{\"prompt\": \"Hello\", \"max_tokens\": 7}\n\n  {\"prompt\": \"h\\u00e9\"}  \r\n", 32);
  ASSERT_TRUE(d.ok()) << d.status();
  ASSERT_EQ(d->size(), 2u);
  EXPECT_EQ((*d)[0].prompt, "Hello");
  EXPECT_EQ((*d)[0].max_tokens, 7);
  EXPECT_EQ((*d)[1].prompt, "h\xc3\xa9");
  EXPECT_EQ((*d)[1].max_tokens, 32);  // the default
  EXPECT_EQ((*d)[1].target_prompt_tokens, 0);
}

TEST(DatasetTest, NamesTheBadLine) {
  for (const char* text : {"{\"prompt\": \"a\"}\nnot json\n", "{\"prompt\": \"a\"}\n{\"max_tokens\": 3}\n",
                           "{\"prompt\": \"a\"}\n{\"prompt\": \"b\", \"max_tokens\": 0}\n",
                           "{\"prompt\": \"a\"}\n[1, 2]\n"}) {
    absl::StatusOr<std::vector<ServeRequest>> d = ParseJsonlDataset(text, 16);
    ASSERT_FALSE(d.ok()) << text;
    EXPECT_EQ(d.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(d.status().message().find("line 2"), absl::string_view::npos) << d.status();
  }
  EXPECT_FALSE(ParseJsonlDataset("\n\n", 16).ok());
  EXPECT_EQ(LoadJsonlDataset("/nonexistent/file.jsonl", 16).status().code(),
            absl::StatusCode::kNotFound);
}

TEST(DatasetTest, SampleIsASeededShuffleRepeated) {
  std::vector<ServeRequest> dataset;
  for (int i = 0; i < 5; ++i) dataset.push_back({.prompt = std::to_string(i), .max_tokens = 1});
  std::mt19937_64 a(1), b(1);
  const std::vector<ServeRequest> s = SampleDataset(dataset, 12, a);
  const std::vector<ServeRequest> t = SampleDataset(dataset, 12, b);
  ASSERT_EQ(s.size(), 12u);
  std::vector<int> seen(5, 0);
  for (size_t i = 0; i < s.size(); ++i) {
    EXPECT_EQ(s[i].prompt, t[i].prompt);
    if (i < 5) ++seen[std::stoi(s[i].prompt)];
    if (i >= 5) {
      EXPECT_EQ(s[i].prompt, s[i - 5].prompt);
    }
  }
  for (int count : seen) EXPECT_EQ(count, 1);  // the first pass is a permutation
}

TEST(PromptTest, WordsPromptHasThatManyWords) {
  std::mt19937_64 rng(5);
  const std::string p = WordsPrompt(37, rng);
  const std::vector<std::string> words = absl::StrSplit(p, ' ', absl::SkipEmpty());
  EXPECT_EQ(words.size(), 37u);
  EXPECT_EQ(p.front(), ' ');
  const std::vector<std::string> twice = absl::StrSplit(CalibrationPrompt(2), ' ', absl::SkipEmpty());
  EXPECT_EQ(twice.size(), 2 * PromptWords().size());
}

TEST(PromptTest, CalibrationFromTwoProbes) {
  const int32_t n = static_cast<int32_t>(PromptWords().size());
  absl::StatusOr<PromptCalibration> c = CalibrationFromProbes(n + 1, 2 * n + 1);  // a BOS token
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_DOUBLE_EQ(c->tokens_per_word, 1.0);
  EXPECT_EQ(c->overhead_tokens, 1);
  EXPECT_TRUE(c->measured);
  EXPECT_EQ(WordsForTokens(256, *c), 255);
  EXPECT_EQ(WordsForTokens(1, *c), 1);  // never empty
  EXPECT_FALSE(CalibrationFromProbes(50, 50).ok());
  EXPECT_FALSE(CalibrationFromProbes(0, 10).ok());

  absl::StatusOr<PromptCalibration> two = CalibrationFromProbes(2 * n, 4 * n);
  ASSERT_TRUE(two.ok());
  EXPECT_DOUBLE_EQ(two->tokens_per_word, 2.0);
  EXPECT_EQ(WordsForTokens(100, *two), 50);
}

TEST(PromptTest, SyntheticRequestsCarryTheirTargets) {
  std::mt19937_64 rng(11);
  const PromptCalibration c{.tokens_per_word = 1, .overhead_tokens = 0, .measured = true};
  const std::vector<ServeRequest> r = SyntheticRequests(50, 64, 16, 0.25, c, rng);
  ASSERT_EQ(r.size(), 50u);
  for (const ServeRequest& q : r) {
    EXPECT_GE(q.target_prompt_tokens, 48);
    EXPECT_LE(q.target_prompt_tokens, 80);
    EXPECT_GE(q.max_tokens, 12);
    EXPECT_LE(q.max_tokens, 20);
    const std::vector<std::string> words = absl::StrSplit(q.prompt, ' ', absl::SkipEmpty());
    EXPECT_EQ(static_cast<int32_t>(words.size()), q.target_prompt_tokens);
  }
  std::mt19937_64 again(11);
  EXPECT_EQ(SyntheticRequests(50, 64, 16, 0.25, c, again)[7].prompt, r[7].prompt);
}

TEST(ConversationTest, SyntheticConversationsShareTheSystemPromptAndEachTurnExtendsTheLast) {
  std::mt19937_64 rng(5);
  const PromptCalibration c{.tokens_per_word = 1, .overhead_tokens = 0, .measured = true};
  const std::vector<Conversation> conversations = SyntheticConversations(3, 4, 100, 20, 8, c, rng);
  ASSERT_EQ(conversations.size(), 3u);
  for (const Conversation& conversation : conversations) {
    EXPECT_EQ(conversation.system, conversations[0].system);
    EXPECT_EQ(conversation.max_tokens, 8);
    ASSERT_EQ(conversation.user_turns.size(), 4u);
    const std::vector<std::string> words =
        absl::StrSplit(conversation.user_turns[2], ' ', absl::SkipEmpty());
    EXPECT_EQ(words.size(), 20u);
  }
  EXPECT_NE(conversations[0].user_turns[0], conversations[1].user_turns[0]);
  const std::vector<std::string> system_words =
      absl::StrSplit(conversations[0].system, ' ', absl::SkipEmpty());
  EXPECT_EQ(system_words.size(), 101u);  // "System:" and 100 words

  // Turn 2's prompt starts with all of turn 1's prompt and its answer.
  const std::string turn1 = ConversationPrompt(conversations[0].system, "hello");
  const std::string turn2 = ConversationPrompt(ConversationHistory(turn1, " hi there"), " again");
  EXPECT_EQ(turn2.rfind(turn1 + " hi there", 0), 0u);
  EXPECT_NE(turn2.find("User: again"), std::string::npos);
}

}  // namespace
}  // namespace baton::bench
