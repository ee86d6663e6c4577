#include "engine/ngram_proposer.h"

#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace baton::engine {
namespace {

using testing::ElementsAre;
using testing::IsEmpty;

TEST(PromptLookupTest, ProposesWhatFollowedTheLatestEarlierOccurrenceOfTheSuffix) {
  // "5 6" occurs at 1 (followed by 7 8) and at 5 (followed by 9 1); the latest wins.
  const std::vector<TokenId> tokens = {4, 5, 6, 7, 8, 5, 6, 9, 1, 2, 5, 6};
  EXPECT_THAT(PromptLookup(tokens, 3, {.min_n = 2, .max_n = 2}), ElementsAre(9, 1, 2));
}

TEST(PromptLookupTest, PrefersTheLongestMatchingSuffix) {
  // The 3-gram "1 5 6" matches only at 0 (-> 7); the 2-gram "5 6" matches later at 5 (-> 9).
  const std::vector<TokenId> tokens = {1, 5, 6, 7, 3, 5, 6, 9, 0, 1, 5, 6};
  EXPECT_THAT(PromptLookup(tokens, 1, {.min_n = 2, .max_n = 3}), ElementsAre(7));
  EXPECT_THAT(PromptLookup(tokens, 1, {.min_n = 2, .max_n = 2}), ElementsAre(9));
}

TEST(PromptLookupTest, ALongerEarlierMatchBeatsALaterShorterOne) {
  // The last 6 tokens "1 2 3 4 5 6" occurred at 0 (-> 7); only their last 4 occur later, at 9
  // (-> 8). Past the old 4-token window the earlier, longer match wins; capped at 4 they tie and
  // the later wins.
  const std::vector<TokenId> tokens = {1, 2, 3, 4, 5, 6, 7, 0, 0, 3, 4, 5, 6, 8,
                                       9, 1, 2, 3, 4, 5, 6};
  EXPECT_THAT(PromptLookup(tokens, 2, {}), ElementsAre(7, 0));
  EXPECT_THAT(PromptLookup(tokens, 2, {.min_n = 2, .max_n = 4}), ElementsAre(8, 9));
}

TEST(PromptLookupTest, StopsAtTheEndOfTheSequence) {
  // The only earlier "2 3" is followed by one token before the suffix starts... and the suffix.
  const std::vector<TokenId> tokens = {2, 3, 2, 3};
  EXPECT_THAT(PromptLookup(tokens, 8, {.min_n = 2, .max_n = 2}), ElementsAre(2, 3));
}

TEST(PromptLookupTest, EmptyWithoutAMatchOrWithoutRoom) {
  const std::vector<TokenId> tokens = {1, 2, 3, 4, 5};
  EXPECT_THAT(PromptLookup(tokens, 4, {.min_n = 1, .max_n = 3}), IsEmpty());
  EXPECT_THAT(PromptLookup({}, 4, {}), IsEmpty());
  const std::vector<TokenId> repeat = {7, 7, 7};
  EXPECT_THAT(PromptLookup(repeat, 0, {.min_n = 1, .max_n = 1}), IsEmpty());
  EXPECT_THAT(PromptLookup(repeat, 2, {.min_n = 1, .max_n = 1}), ElementsAre(7));
}

TEST(NgramProposerTest, FillsEveryRequest) {
  std::unique_ptr<Proposer> proposer = CreateNgramProposer({.min_n = 1, .max_n = 2});
  const std::vector<TokenId> a = {1, 2, 3, 1, 2};
  const std::vector<TokenId> b = {9, 8};
  std::vector<ProposalRequest> requests = {{.sequence = 1, .tokens = a, .max_tokens = 2},
                                           {.sequence = 2, .tokens = b, .max_tokens = 2}};
  requests[1].proposal = {42};  // stale output is replaced
  proposer->Propose(requests);
  EXPECT_THAT(requests[0].proposal, ElementsAre(3, 1));
  EXPECT_THAT(requests[1].proposal, IsEmpty());
}

}  // namespace
}  // namespace baton::engine
