#include "engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "engine/draw_weights.h"
#include "engine/sampling_params.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace baton::engine {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr float kInf = std::numeric_limits<float>::infinity();

// Softmax of logits / temperature, in double.
std::vector<double> Softmax(const std::vector<float>& logits, double temperature = 1.0) {
  const double max = *std::max_element(logits.begin(), logits.end());
  std::vector<double> p(logits.size());
  double sum = 0;
  for (size_t i = 0; i < logits.size(); ++i) {
    p[i] = std::exp((logits[i] - max) / temperature);
    sum += p[i];
  }
  for (double& x : p) x /= sum;
  return p;
}

// Token counts over positions [0, n_draws).
std::vector<int> Histogram(const SamplingParams& params, const std::vector<float>& logits,
                           int n_draws, int64_t first_position = 0) {
  Sampler sampler;
  std::vector<int> counts(logits.size(), 0);
  for (int i = 0; i < n_draws; ++i) {
    const int32_t id = sampler.Sample(params, logits, {}, first_position + i);
    EXPECT_GE(id, 0);
    EXPECT_LT(id, static_cast<int32_t>(logits.size()));
    ++counts[id];
  }
  return counts;
}

// Deterministic pseudo-random logits in [-4, 4), distinct with overwhelming likelihood.
std::vector<float> MakeLogits(int n, uint64_t seed) {
  std::vector<float> logits(n);
  for (int i = 0; i < n; ++i) logits[i] = static_cast<float>(CounterUniform(seed, i) * 8.0 - 4.0);
  return logits;
}

// Ids sorted by logit, highest first.
std::vector<int32_t> RankByLogit(const std::vector<float>& logits) {
  std::vector<int32_t> ids(logits.size());
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>(i);
  std::stable_sort(ids.begin(), ids.end(),
                   [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
  return ids;
}

// ---------------------------------------------------------------------------------------------
// The counter-based RNG.

TEST(CounterUniformTest, IsAPureFunctionOfSeedAndPosition) {
  EXPECT_EQ(CounterUniform(7, 123), CounterUniform(7, 123));
  EXPECT_NE(CounterUniform(7, 123), CounterUniform(7, 124));
  EXPECT_NE(CounterUniform(7, 123), CounterUniform(8, 123));
}

TEST(CounterUniformTest, IsUniformInUnitInterval) {
  constexpr int kN = 100000;
  constexpr int kBins = 10;
  std::vector<int> bins(kBins, 0);
  std::set<double> distinct;
  double mean = 0;
  for (int i = 0; i < kN; ++i) {
    const double u = CounterUniform(kDefaultSamplingSeed, i);
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
    ++bins[static_cast<int>(u * kBins)];
    distinct.insert(u);
    mean += u / kN;
  }
  EXPECT_EQ(distinct.size(), static_cast<size_t>(kN));
  EXPECT_NEAR(mean, 0.5, 0.005);
  double chi2 = 0;
  for (int count : bins) chi2 += std::pow(count - kN / kBins, 2) / (kN / kBins);
  EXPECT_LT(chi2, 27.9);  // 9 degrees of freedom, p = 0.001
}

TEST(CounterUniformTest, NearbySeedsAreUncorrelated) {
  // Seeds s and s+1 at the same positions: the fraction of positions where both fall in the same
  // half of [0, 1) should be about one half.
  int same_half = 0;
  constexpr int kN = 20000;
  for (int i = 0; i < kN; ++i) {
    same_half += (CounterUniform(41, i) < 0.5) == (CounterUniform(42, i) < 0.5);
  }
  EXPECT_NEAR(same_half / static_cast<double>(kN), 0.5, 0.02);
}

// ---------------------------------------------------------------------------------------------
// Greedy.

TEST(SamplerTest, TemperatureZeroIsArgmax) {
  const std::vector<float> logits = MakeLogits(1000, 3);
  const int32_t argmax =
      static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
  SamplingParams params{.temperature = 0.0f};
  for (int64_t position = 0; position < 100; ++position) {
    EXPECT_EQ(Sample(params, logits, {}, position), argmax);
  }
}

TEST(SamplerTest, TopKOneIsArgmax) {
  const std::vector<float> logits = MakeLogits(1000, 4);
  const int32_t argmax =
      static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
  SamplingParams params{.temperature = 5.0f, .top_k = 1};
  for (int64_t position = 0; position < 100; ++position) {
    EXPECT_EQ(Sample(params, logits, {}, position), argmax);
  }
}

TEST(SamplerTest, GreedyTieGoesToLowestId) {
  const std::vector<float> logits = {0.0f, 3.0f, 1.0f, 3.0f, 3.0f};
  EXPECT_EQ(Sample({.temperature = 0.0f}, logits, {}, 0), 1);
}

TEST(SamplerTest, GreedyFindsTheFirstLargestAnywhere) {
  // 1000 logits: blocks of 256, lanes of 16 and tails of both. The maximum, placed at each
  // boundary with a later copy, is found at its first index; NaN never wins, +inf equals the
  // largest float (Sanitize) and so loses to an earlier largest float.
  for (const int32_t first : {0, 15, 16, 255, 256, 767, 768, 990, 999}) {
    std::vector<float> logits = MakeLogits(1000, first);
    logits[(first + 500) % 1000] = std::nanf("");
    logits[first] = 100.0f;
    if (first + 1 < 1000) logits[first + 1 + (999 - first) / 2] = 100.0f;
    EXPECT_EQ(Sample({.temperature = 0.0f}, logits, {}, 0), first) << first;
  }
  std::vector<float> logits(1000, -kInf);
  logits[300] = std::numeric_limits<float>::max();
  logits[700] = kInf;
  EXPECT_EQ(Sample({.temperature = 0.0f}, logits, {}, 0), 300);
  logits[300] = -kInf;
  EXPECT_EQ(Sample({.temperature = 0.0f}, logits, {}, 0), 700);
}

// (logit, id) pairs, in the order a draw walks them.
using Kept = std::vector<std::pair<float, int32_t>>;

// The unmasked logits of `raw` (NaN masked, +inf the largest float), in id order.
Kept Unmasked(const std::vector<float>& raw) {
  Kept kept;
  for (int32_t i = 0; i < static_cast<int32_t>(raw.size()); ++i) {
    const float finite = std::min(raw[i], std::numeric_limits<float>::max());
    const float logit = std::isnan(raw[i]) ? -kInf : finite;
    if (logit != -kInf) kept.push_back({logit, i});
  }
  return kept;
}

// Ordered by logit, highest first; the lower id first among equal logits.
void SortByLogit(Kept& kept) {
  std::sort(kept.begin(), kept.end(), [](const auto& a, const auto& b) {
    return a.first > b.first || (a.first == b.first && a.second < b.second);
  });
}

// One draw over `kept` as the definition states it: exp((logit - max) / T) weights (the
// sampler's exp, draw_weights.h, whose own accuracy draw_weights_test holds) and a running sum.
int32_t DrawByDefinition(const Kept& kept, float temperature, uint64_t seed, int64_t position) {
  float max = -kInf;
  for (const auto& c : kept) max = std::max(max, c.first);
  std::vector<float> weights;
  double sum = 0;
  for (const auto& c : kept) {
    weights.push_back(DrawWeight(c.first, max, 1.0f / temperature));
    sum += weights.back();
  }
  const double target = CounterUniform(seed, position) * sum;
  double cumulative = 0;
  for (size_t i = 0; i < kept.size(); ++i) {
    cumulative += weights[i];
    if (target < cumulative) return kept[i].second;
  }
  return kept.back().second;
}

// Top-k sampling as its definition states it, over a sort of the whole vocabulary: the k best by
// (logit, then lower id) in that order when more than k logits are unmasked, else every unmasked
// logit in id order; then one draw (top_p = 1, min_p = 0).
int32_t TopKByDefinition(const std::vector<float>& raw, int32_t k, float temperature,
                         uint64_t seed, int64_t position) {
  Kept kept = Unmasked(raw);
  if (kept.size() > static_cast<size_t>(k)) {
    SortByLogit(kept);
    kept.resize(k);
  }
  return DrawByDefinition(kept, temperature, seed, position);
}

TEST(SamplerTest, TopKOverAWholeVocabularyDrawsAsItsDefinition) {
  // 49,152 logits (192 blocks of 256) with ties across blocks at and around the k-th value,
  // NaN, -inf and +inf; then vocabularies where few blocks or few logits are unmasked.
  std::vector<float> logits = MakeLogits(49152, 21);
  for (int i = 0; i < 49152; i += 97) logits[i] = 3.5f;  // a tie of about 500 near the top
  for (int i = 5; i < 49152; i += 1001) logits[i] = std::nanf("");
  for (int i = 7; i < 49152; i += 499) logits[i] = -kInf;
  logits[40000] = kInf;
  std::vector<float> few_blocks(49152, -kInf);
  for (int i = 0; i < 600; ++i) few_blocks[i] = logits[i];  // 3 blocks hold every logit
  std::vector<float> just_over(49152, -kInf);
  std::vector<float> exactly_k(49152, -kInf);
  for (int i = 0; i < 41; ++i) just_over[i * 1024 + 3] = logits[i * 1024 + 3];
  for (int i = 0; i < 40; ++i) exactly_k[i * 1024 + 3] = logits[i * 1024 + 3];
  Sampler sampler;
  const std::vector<const std::vector<float>*> vocabularies = {&logits, &few_blocks, &just_over,
                                                               &exactly_k};
  for (size_t v = 0; v < vocabularies.size(); ++v) {
    for (const int32_t k : {2, 40, 192, 193, 1000}) {
      const SamplingParams params{.temperature = 0.7f, .top_k = k, .seed = 9};
      for (int64_t position = 0; position < 40; ++position) {
        ASSERT_EQ(sampler.Sample(params, *vocabularies[v], {}, position),
                  TopKByDefinition(*vocabularies[v], k, 0.7f, 9, position))
            << "vocabulary " << v << " k " << k << " position " << position;
      }
    }
  }
}

// Top-p sampling as its definition states it, over a sort of the whole vocabulary: every
// unmasked logit ordered by (logit, then lower id); the shortest prefix whose exp(logit - max)
// weights reach top_p of their total; then one draw over that prefix, in that order (no top-k,
// min_p = 0).
int32_t TopPByDefinition(const std::vector<float>& raw, float top_p, float temperature,
                         uint64_t seed, int64_t position) {
  Kept kept = Unmasked(raw);
  SortByLogit(kept);
  const float max = kept.front().first;
  double total = 0;
  for (const auto& c : kept) total += DrawWeight(c.first, max, 1.0f);
  double cumulative = 0;
  for (size_t i = 0; i < kept.size(); ++i) {
    cumulative += DrawWeight(kept[i].first, max, 1.0f);
    if (cumulative >= top_p * total) {
      kept.resize(i + 1);
      break;
    }
  }
  return DrawByDefinition(kept, temperature, seed, position);
}

// Top-p with no top-k, over flat logits (a nucleus of thousands), peaked ones (a handful) and
// ones with NaN, -inf and +inf: the nucleus found from the histogram is the definition's.
TEST(SamplerTest, TopPOverAWholeVocabularyDrawsAsItsDefinition) {
  std::vector<float> flat = MakeLogits(49152, 23);
  std::vector<float> peaked = flat;
  for (int i = 0; i < 5; ++i) peaked[1000 + 7919 * i] = 12.0f - i;
  std::vector<float> odd = flat;
  for (int i = 5; i < 49152; i += 1001) odd[i] = std::nanf("");
  for (int i = 7; i < 49152; i += 499) odd[i] = -kInf;
  for (int i = 0; i < 49152; i += 97) odd[i] = 3.5f;  // ties across the buckets' boundaries
  std::vector<float> certain = odd;
  certain[40000] = kInf;
  Sampler sampler;
  const std::vector<const std::vector<float>*> vocabularies = {&flat, &peaked, &odd, &certain};
  for (size_t v = 0; v < vocabularies.size(); ++v) {
    for (const float top_p : {0.3f, 0.9f, 0.99f}) {
      const SamplingParams params{.temperature = 0.8f, .top_p = top_p, .seed = 5};
      for (int64_t position = 0; position < 30; ++position) {
        ASSERT_EQ(sampler.Sample(params, *vocabularies[v], {}, position),
                  TopPByDefinition(*vocabularies[v], top_p, 0.8f, 5, position))
            << "vocabulary " << v << " top_p " << top_p << " position " << position;
      }
    }
  }
}

// No filter at all (the OpenAI API's default: temperature 1, no top-k, top_p 1): the draw over
// the logits in place picks what the definition picks from every unmasked logit in id order.
TEST(SamplerTest, AnUnfilteredDrawOverAWholeVocabularyDrawsAsItsDefinition) {
  std::vector<float> logits = MakeLogits(49152, 22);
  for (int i = 5; i < 49152; i += 1001) logits[i] = std::nanf("");
  for (int i = 7; i < 49152; i += 499) logits[i] = -kInf;
  std::vector<float> one_left(49152, -kInf);
  one_left[31000] = 2.0f;
  Sampler sampler;
  for (const float temperature : {1.0f, 0.7f, 2.5f}) {
    for (int64_t position = 0; position < 60; ++position) {
      const SamplingParams params{.temperature = temperature, .seed = 4};
      ASSERT_EQ(sampler.Sample(params, logits, {}, position),
                TopKByDefinition(logits, 49152, temperature, 4, position))
          << "temperature " << temperature << " position " << position;
      ASSERT_EQ(sampler.Sample(params, one_left, {}, position), 31000);
    }
  }
  logits[40000] = kInf;  // certain: every draw takes it
  EXPECT_EQ(sampler.Sample({.temperature = 1.0f, .seed = 4}, logits, {}, 3), 40000);
  EXPECT_EQ(sampler.Sample({.temperature = 1.0f}, std::vector<float>(300, -kInf), {}, 0), 0);
}

TEST(SamplerTest, GreedyStillAppliesPenalties) {
  // Token 0 leads by 0.5; after it appears once, repetition penalty 2 halves it (3 -> 1.5), so
  // token 1 (2.5) wins.
  const std::vector<float> logits = {3.0f, 2.5f, 1.0f};
  const std::vector<int32_t> previous = {0};
  SamplingParams params{.temperature = 0.0f};
  EXPECT_EQ(Sample(params, logits, previous, 1), 0);
  params.repetition_penalty = 2.0f;
  EXPECT_EQ(Sample(params, logits, previous, 1), 1);
  // Presence penalty alone does the same.
  params.repetition_penalty = 1.0f;
  params.presence_penalty = 0.6f;
  EXPECT_EQ(Sample(params, logits, previous, 1), 1);
}

// ---------------------------------------------------------------------------------------------
// Filters.

TEST(SamplerTest, TopKNeverLeavesTheTopK) {
  const std::vector<float> logits = MakeLogits(500, 11);
  const std::vector<int32_t> ranked = RankByLogit(logits);
  const std::set<int32_t> top5(ranked.begin(), ranked.begin() + 5);
  // A high temperature flattens the distribution so that the tail would be drawn often.
  const SamplingParams params{.temperature = 3.0f, .top_k = 5};
  const std::vector<int> counts = Histogram(params, logits, 10000);
  for (int32_t id = 0; id < static_cast<int32_t>(logits.size()); ++id) {
    if (top5.count(id)) {
      EXPECT_GT(counts[id], 0) << "top-5 token " << id << " never drawn";
    } else {
      EXPECT_EQ(counts[id], 0) << "token " << id << " is outside the top 5";
    }
  }
}

TEST(SamplerTest, TopKProbabilitiesAreRenormalized) {
  const std::vector<float> logits = {1.0f, 0.0f, 2.0f, -1.0f, 0.5f, -3.0f};
  const SamplingParams params{.top_k = 3};
  constexpr int kDraws = 20000;
  const std::vector<int> counts = Histogram(params, logits, kDraws);
  const std::vector<double> expected = Softmax({1.0f, 2.0f, 0.5f});  // ids 0, 2, 4
  EXPECT_NEAR(counts[0] / double{kDraws}, expected[0], 0.02);
  EXPECT_NEAR(counts[2] / double{kDraws}, expected[1], 0.02);
  EXPECT_NEAR(counts[4] / double{kDraws}, expected[2], 0.02);
  EXPECT_EQ(counts[1] + counts[3] + counts[5], 0);
}

TEST(SamplerTest, TopKTieAtTheBoundaryKeepsLowerIds) {
  // Ids 1, 2, 3 tie for the second place; top_k = 2 keeps 0 and 1.
  const std::vector<float> logits = {2.0f, 1.0f, 1.0f, 1.0f};
  const std::vector<int> counts = Histogram({.top_k = 2}, logits, 2000);
  EXPECT_GT(counts[0], 0);
  EXPECT_GT(counts[1], 0);
  EXPECT_EQ(counts[2] + counts[3], 0);
}

TEST(SamplerTest, TopKLargerThanVocabIsOff) {
  const std::vector<float> logits = {0.0f, 0.0f, 0.0f};
  const std::vector<int> counts = Histogram({.top_k = 100}, logits, 3000);
  for (int c : counts) EXPECT_GT(c, 800);
}

// The nucleus at temperature 1: the shortest most-likely prefix reaching top_p.
std::set<int32_t> Nucleus(const std::vector<float>& logits, double top_p) {
  const std::vector<double> p = Softmax(logits);
  std::set<int32_t> nucleus;
  double cumulative = 0;
  for (int32_t id : RankByLogit(logits)) {
    nucleus.insert(id);
    cumulative += p[id];
    if (cumulative >= top_p) break;
  }
  return nucleus;
}

TEST(SamplerTest, TopPNeverLeavesTheNucleus) {
  const std::vector<float> logits = MakeLogits(200, 21);
  const std::set<int32_t> nucleus = Nucleus(logits, 0.5);
  ASSERT_GT(nucleus.size(), 3u);
  ASSERT_LT(nucleus.size(), 150u);
  const std::vector<int> counts = Histogram({.top_p = 0.5f}, logits, 10000);
  int drawn_members = 0;
  for (int32_t id = 0; id < static_cast<int32_t>(logits.size()); ++id) {
    if (nucleus.count(id)) {
      drawn_members += counts[id] > 0;
    } else {
      EXPECT_EQ(counts[id], 0) << "token " << id << " is outside the nucleus";
    }
  }
  // Every member has probability >= 1/200 within the nucleus, so all should show up.
  EXPECT_EQ(drawn_members, static_cast<int>(nucleus.size()));
}

TEST(SamplerTest, TopPIsJudgedBeforeTemperature) {
  // p at T=1: {0.665, 0.245, 0.090}. top_p = 0.8 keeps ids 0 and 1 only, even though a high
  // temperature would make id 2 likely if it survived.
  const std::vector<float> logits = {2.0f, 1.0f, 0.0f};
  ASSERT_EQ(Nucleus(logits, 0.8), (std::set<int32_t>{0, 1}));
  const std::vector<int> counts = Histogram({.temperature = 10.0f, .top_p = 0.8f}, logits, 5000);
  EXPECT_EQ(counts[2], 0);
  // At T=10 the survivors are nearly even: exp(0.1) = 1.105.
  EXPECT_NEAR(counts[0] / static_cast<double>(counts[1]), std::exp(0.1), 0.08);
}

TEST(SamplerTest, TopPKeepsTheTokenThatCrossesTheThreshold) {
  // p = {0.5, 0.25, 0.25}: top_p = 0.6 needs ids 0 and one of the tied others (the lower id).
  const std::vector<float> logits = {std::log(2.0f), 0.0f, 0.0f};
  const std::vector<int> counts = Histogram({.top_p = 0.6f}, logits, 3000);
  EXPECT_GT(counts[0], 0);
  EXPECT_GT(counts[1], 0);
  EXPECT_EQ(counts[2], 0);
}

TEST(SamplerTest, MinPThresholdIsRespected) {
  const std::vector<float> logits = MakeLogits(300, 31);
  const double max = *std::max_element(logits.begin(), logits.end());
  constexpr float kMinP = 0.05f;
  const double threshold = max + std::log(kMinP);  // p >= min_p * p_max in logit terms
  int n_kept = 0;
  for (float l : logits) n_kept += l >= threshold;
  ASSERT_GT(n_kept, 5);
  ASSERT_LT(n_kept, 250);

  const std::vector<int> counts = Histogram({.temperature = 2.0f, .min_p = kMinP}, logits, 20000);
  int drawn_kept = 0;
  for (size_t id = 0; id < logits.size(); ++id) {
    if (logits[id] >= threshold) {
      drawn_kept += counts[id] > 0;
    } else {
      EXPECT_EQ(counts[id], 0) << "token " << id << " is below the min-p threshold";
    }
  }
  EXPECT_EQ(drawn_kept, n_kept);
}

TEST(SamplerTest, MinPOneKeepsOnlyTheMaximum) {
  const std::vector<float> logits = {0.0f, 1.0f, 0.999f};
  const std::vector<int> counts = Histogram({.temperature = 5.0f, .min_p = 1.0f}, logits, 500);
  EXPECT_EQ(counts[1], 500);
}

TEST(SamplerTest, MaskedTokensAreNeverDrawn) {
  const std::vector<float> logits = {-kInf, 0.0f, -kInf, 0.0f, std::nanf("")};
  const std::vector<int> counts = Histogram({.temperature = 1.0f}, logits, 2000);
  EXPECT_EQ(counts[0] + counts[2] + counts[4], 0);
  EXPECT_GT(counts[1], 800);
  EXPECT_GT(counts[3], 800);
}

TEST(SamplerTest, DegenerateLogitsStillGiveAToken) {
  const std::vector<float> all_masked = {-kInf, -kInf, std::nanf("")};
  EXPECT_EQ(Sample({}, all_masked, {}, 0), 0);
  EXPECT_EQ(Sample({.temperature = 0.0f}, all_masked, {}, 0), 0);
  const std::vector<float> with_inf = {0.0f, kInf, 1.0f};
  for (int64_t position = 0; position < 50; ++position) {
    EXPECT_EQ(Sample({}, with_inf, {}, position), 1);
  }
  // A penalty that pushes the largest float to +inf still gives that token.
  const std::vector<float> huge = {0.0f, std::numeric_limits<float>::max(), 1.0f};
  const std::vector<int32_t> previous = {1};
  for (int64_t position = 0; position < 20; ++position) {
    EXPECT_EQ(Sample({.top_p = 0.9f, .min_p = 0.1f, .repetition_penalty = 0.5f}, huge, previous,
                     position),
              1);
  }
  // A tiny temperature behaves as greedy rather than overflowing.
  const std::vector<float> close = {1.0f, 1.001f, 0.5f};
  for (int64_t position = 0; position < 50; ++position) {
    EXPECT_EQ(Sample({.temperature = 1e-30f}, close, {}, position), 1);
  }
}

// ---------------------------------------------------------------------------------------------
// Distribution.

TEST(SamplerTest, TemperatureOneMatchesSoftmax) {
  const std::vector<float> logits = {1.5f, 0.2f, -0.7f, 0.9f, -2.0f};
  const std::vector<double> p = Softmax(logits);
  constexpr int kDraws = 20000;
  const std::vector<int> counts = Histogram({}, logits, kDraws);
  double chi2 = 0;
  for (size_t i = 0; i < logits.size(); ++i) {
    EXPECT_NEAR(counts[i] / double{kDraws}, p[i], 0.02) << "token " << i;
    const double expected = p[i] * kDraws;
    chi2 += (counts[i] - expected) * (counts[i] - expected) / expected;
  }
  EXPECT_LT(chi2, 18.47);  // 4 degrees of freedom, p = 0.001
}

TEST(SamplerTest, LowTemperatureSharpens) {
  const std::vector<float> logits = {1.0f, 0.5f, 0.0f, -0.5f, -1.0f};
  constexpr float kTemperature = 0.5f;
  constexpr int kDraws = 20000;
  const std::vector<int> counts = Histogram({.temperature = kTemperature}, logits, kDraws);
  const double expected_ratio = std::exp((logits[0] - logits[1]) / kTemperature);  // e
  ASSERT_GT(counts[1], 0);
  EXPECT_NEAR(counts[0] / static_cast<double>(counts[1]), expected_ratio, 0.08 * expected_ratio);
  // And the top token is more likely than at temperature 1.
  EXPECT_GT(counts[0] / double{kDraws}, Softmax(logits)[0] + 0.1);
  const std::vector<double> p = Softmax(logits, kTemperature);
  for (size_t i = 0; i < logits.size(); ++i) {
    EXPECT_NEAR(counts[i] / double{kDraws}, p[i], 0.02) << "token " << i;
  }
}

TEST(SamplerTest, HighTemperatureFlattens) {
  const std::vector<float> logits = {2.0f, 0.0f};
  const std::vector<int> counts = Histogram({.temperature = 100.0f}, logits, 10000);
  EXPECT_NEAR(counts[0] / 10000.0, Softmax(logits, 100.0)[0], 0.02);
}

// ---------------------------------------------------------------------------------------------
// Determinism.

TEST(SamplerTest, SameSeedAndPositionGiveTheSameToken) {
  const std::vector<float> logits = MakeLogits(1000, 41);
  const std::vector<int32_t> previous = {1, 2, 3};
  const SamplingParams params{.top_p = 0.95f, .repetition_penalty = 1.1f, .seed = 1234};
  Sampler a;
  Sampler b;
  for (int64_t position = 0; position < 200; ++position) {
    const int32_t first = a.Sample(params, logits, previous, position);
    EXPECT_EQ(b.Sample(params, logits, previous, position), first);
    EXPECT_EQ(Sample(params, logits, previous, position), first);
  }
}

TEST(SamplerTest, DifferentPositionsAndSeedsGiveDifferentDraws) {
  // A uniform distribution over 64 tokens: 1000 positions should visit nearly all of them.
  const std::vector<float> logits(64, 0.0f);
  std::set<int32_t> seen;
  int same_as_other_seed = 0;
  for (int64_t position = 0; position < 1000; ++position) {
    const int32_t id = Sample({.seed = 5}, logits, {}, position);
    seen.insert(id);
    same_as_other_seed += id == Sample({.seed = 6}, logits, {}, position);
  }
  EXPECT_EQ(seen.size(), 64u);
  EXPECT_LT(same_as_other_seed, 60);  // about 1000 / 64 by chance
}

// A toy "model": the logits at each step depend on the request and the previous token.
std::vector<float> StepLogits(int request, int32_t previous_token, int n_vocab) {
  std::vector<float> logits(n_vocab);
  for (int i = 0; i < n_vocab; ++i) {
    logits[i] = static_cast<float>(
        CounterUniform(static_cast<uint64_t>(request) * 1000003 + previous_token, i) * 6.0 - 3.0);
  }
  return logits;
}

std::vector<int32_t> Generate(Sampler& sampler, int request, const SamplingParams& params,
                              std::vector<int32_t>& context, int n_steps) {
  std::vector<int32_t> generated;
  for (int step = 0; step < n_steps; ++step) {
    const std::vector<float> logits = StepLogits(request, context.back(), 97);
    const int32_t id =
        sampler.Sample(params, logits, context, static_cast<int64_t>(context.size()));
    context.push_back(id);
    generated.push_back(id);
  }
  return generated;
}

TEST(SamplerTest, RequestsAreIndependentOfCallOrder) {
  const SamplingParams params_a{.temperature = 0.9f, .top_k = 40, .seed = 77};
  const SamplingParams params_b{.temperature = 1.3f,
                                .top_p = 0.9f,
                                .min_p = 0.02f,
                                .repetition_penalty = 1.2f,
                                .frequency_penalty = 0.3f,
                                .seed = 77};
  constexpr int kSteps = 60;

  // Separately, each with its own sampler.
  Sampler sampler_a;
  Sampler sampler_b;
  std::vector<int32_t> context_a = {1, 2, 3};
  std::vector<int32_t> context_b = {4, 5};
  const std::vector<int32_t> alone_a = Generate(sampler_a, 1, params_a, context_a, kSteps);
  const std::vector<int32_t> alone_b = Generate(sampler_b, 2, params_b, context_b, kSteps);
  ASSERT_NE(alone_a, alone_b);

  // Interleaved through one shared sampler, b first at each step.
  Sampler shared;
  std::vector<int32_t> ctx_a = {1, 2, 3};
  std::vector<int32_t> ctx_b = {4, 5};
  std::vector<int32_t> mixed_a;
  std::vector<int32_t> mixed_b;
  for (int step = 0; step < kSteps; ++step) {
    mixed_b.push_back(Generate(shared, 2, params_b, ctx_b, 1)[0]);
    mixed_a.push_back(Generate(shared, 1, params_a, ctx_a, 1)[0]);
  }
  EXPECT_EQ(mixed_a, alone_a);
  EXPECT_EQ(mixed_b, alone_b);
}

// ---------------------------------------------------------------------------------------------
// Penalties, by hand.

TEST(PenaltiesTest, RepetitionDividesPositiveAndMultipliesNegative) {
  std::vector<float> logits = {2.0f, -1.0f, 0.5f, 3.0f, 0.0f};
  const std::vector<int32_t> previous = {0, 1, 0, 4};
  ApplyPenalties({.repetition_penalty = 2.0f}, previous, logits);
  // Count does not matter for the repetition penalty; 0 stays 0.
  EXPECT_THAT(logits, ElementsAre(1.0f, -2.0f, 0.5f, 3.0f, 0.0f));
}

TEST(PenaltiesTest, FrequencyAndPresenceFollowOpenAi) {
  std::vector<float> logits = {2.0f, -1.0f, 0.5f, 3.0f};
  const std::vector<int32_t> previous = {0, 1, 0, 0, 3};
  ApplyPenalties({.frequency_penalty = 0.5f, .presence_penalty = 0.25f}, previous, logits);
  // id 0: count 3 -> 2 - 1.5 - 0.25; id 1: count 1 -> -1 - 0.5 - 0.25; id 3: 3 - 0.75.
  EXPECT_THAT(logits, ElementsAre(0.25f, -1.75f, 0.5f, 2.25f));
}

TEST(PenaltiesTest, NegativePenaltiesEncourageRepetition) {
  std::vector<float> logits = {1.0f, 1.0f};
  ApplyPenalties({.frequency_penalty = -1.0f, .presence_penalty = -0.5f},
                 std::vector<int32_t>{1, 1}, logits);
  EXPECT_THAT(logits, ElementsAre(1.0f, 3.5f));
}

TEST(PenaltiesTest, RepetitionComesBeforeFrequencyAndPresence) {
  std::vector<float> logits = {4.0f, -2.0f};
  ApplyPenalties({.repetition_penalty = 2.0f, .frequency_penalty = 1.0f, .presence_penalty = 0.5f},
                 std::vector<int32_t>{0, 1, 1}, logits);
  // id 0: 4 / 2 - 1 - 0.5 = 0.5; id 1: -2 * 2 - 2 - 0.5 = -6.5.
  EXPECT_THAT(logits, ElementsAre(0.5f, -6.5f));
}

TEST(PenaltiesTest, OnlyTheLastNTokensCount) {
  const std::vector<int32_t> previous = {0, 0, 1, 2, 2};
  {
    std::vector<float> logits = {1.0f, 1.0f, 1.0f};
    ApplyPenalties({.frequency_penalty = 1.0f, .penalty_last_n = 3}, previous, logits);
    EXPECT_THAT(logits, ElementsAre(1.0f, 0.0f, -1.0f));  // window {1, 2, 2}
  }
  {
    std::vector<float> logits = {1.0f, 1.0f, 1.0f};
    ApplyPenalties({.frequency_penalty = 1.0f, .penalty_last_n = -1}, previous, logits);
    EXPECT_THAT(logits, ElementsAre(-1.0f, 0.0f, -1.0f));  // everything
  }
  {
    std::vector<float> logits = {1.0f, 1.0f, 1.0f};
    ApplyPenalties({.frequency_penalty = 1.0f, .penalty_last_n = 0}, previous, logits);
    EXPECT_THAT(logits, ElementsAre(1.0f, 1.0f, 1.0f));  // off
  }
  {
    std::vector<float> logits = {1.0f, 1.0f, 1.0f};
    ApplyPenalties({.frequency_penalty = 1.0f, .penalty_last_n = 100}, previous, logits);
    EXPECT_THAT(logits, ElementsAre(-1.0f, 0.0f, -1.0f));  // longer than the context
  }
}

TEST(PenaltiesTest, OutOfRangePreviousTokensAreIgnored) {
  std::vector<float> logits = {1.0f, 1.0f};
  ApplyPenalties({.presence_penalty = 1.0f}, std::vector<int32_t>{-1, 5, 1}, logits);
  EXPECT_THAT(logits, ElementsAre(1.0f, 0.0f));
}

TEST(PenaltiesTest, SamplerAppliesThemBeforeDrawing) {
  // Token 0 dominates until a strong presence penalty removes its lead entirely.
  const std::vector<float> logits = {5.0f, 0.0f};
  const std::vector<int32_t> previous = {0};
  const std::vector<int> plain = Histogram({}, logits, 2000);
  EXPECT_GT(plain[0], 1950);
  Sampler sampler;
  int zeros = 0;
  const SamplingParams params{.repetition_penalty = 10.0f, .presence_penalty = 2.0f};
  // 5 / 10 - 2 = -1.5 vs 0: p(0) = 0.18.
  for (int i = 0; i < 5000; ++i) zeros += sampler.Sample(params, logits, previous, i) == 0;
  EXPECT_NEAR(zeros / 5000.0, 1.0 / (1.0 + std::exp(1.5)), 0.02);
}

// ---------------------------------------------------------------------------------------------
// TopLogprobs.

TEST(TopLogprobsTest, LogSoftmaxOfRawLogits) {
  // Probabilities 0.1, 0.2, 0.3, 0.4 (logits offset by an arbitrary constant).
  const std::vector<float> logits = {std::log(1.0f) + 7, std::log(2.0f) + 7, std::log(3.0f) + 7,
                                     std::log(4.0f) + 7};
  const std::vector<TokenLogprob> top = TopLogprobs(logits, 3);
  ASSERT_EQ(top.size(), 3u);
  EXPECT_EQ(top[0].id, 3);
  EXPECT_NEAR(top[0].logprob, std::log(0.4), 1e-5);
  EXPECT_EQ(top[1].id, 2);
  EXPECT_NEAR(top[1].logprob, std::log(0.3), 1e-5);
  EXPECT_EQ(top[2].id, 1);
  EXPECT_NEAR(top[2].logprob, std::log(0.2), 1e-5);
}

TEST(TopLogprobsTest, AllTokensSumToOne) {
  const std::vector<float> logits = MakeLogits(1000, 51);
  const std::vector<TokenLogprob> all = TopLogprobs(logits, 5000);  // clamped to 1000
  ASSERT_EQ(all.size(), 1000u);
  double sum = 0;
  for (size_t i = 0; i < all.size(); ++i) {
    sum += std::exp(static_cast<double>(all[i].logprob));
    if (i > 0) {
      EXPECT_GE(all[i - 1].logprob, all[i].logprob);
    }
  }
  EXPECT_NEAR(sum, 1.0, 1e-4);
}

TEST(TopLogprobsTest, TiesAndEdgeCases) {
  const std::vector<float> logits = {0.0f, 1.0f, 1.0f, -kInf};
  const std::vector<TokenLogprob> top = TopLogprobs(logits, 4);
  ASSERT_EQ(top.size(), 4u);
  EXPECT_EQ(top[0].id, 1);
  EXPECT_EQ(top[1].id, 2);
  EXPECT_EQ(top[2].id, 0);
  EXPECT_EQ(top[3].id, 3);
  EXPECT_EQ(top[3].logprob, -kInf);
  EXPECT_TRUE(TopLogprobs(logits, 0).empty());
  EXPECT_TRUE(TopLogprobs(logits, -3).empty());
}

TEST(LogprobsOfTest, TheGeneratedTokenAndTheMostLikely) {
  // Probabilities 0.1, 0.2, 0.3, 0.4.
  const std::vector<float> logits = {std::log(1.0f) - 3, std::log(2.0f) - 3, std::log(3.0f) - 3,
                                     std::log(4.0f) - 3};
  const TokenLogprobs lp = LogprobsOf(logits, 0, 2);
  EXPECT_NEAR(lp.logprob, std::log(0.1), 1e-5);
  ASSERT_EQ(lp.top.size(), 2u);
  EXPECT_EQ(lp.top[0].id, 3);
  EXPECT_NEAR(lp.top[0].logprob, std::log(0.4), 1e-5);
  EXPECT_EQ(lp.top[1].id, 2);
  EXPECT_NEAR(lp.top[1].logprob, std::log(0.3), 1e-5);
  EXPECT_TRUE(LogprobsOf(logits, 3, 0).top.empty());
}

TEST(LogprobsOfTest, AgreesWithTopLogprobsOnLargeVocabularies) {
  const std::vector<float> logits = MakeLogits(49152, 7);
  const std::vector<TokenLogprob> top = TopLogprobs(logits, 20);
  const TokenLogprobs lp = LogprobsOf(logits, top[4].id, 20);
  EXPECT_FLOAT_EQ(lp.logprob, top[4].logprob);
  ASSERT_EQ(lp.top.size(), top.size());
  for (size_t i = 0; i < top.size(); ++i) {
    EXPECT_EQ(lp.top[i].id, top[i].id);
    EXPECT_FLOAT_EQ(lp.top[i].logprob, top[i].logprob);
  }
}

TEST(LogprobsOfTest, MaskedAndNanLogitsHaveNoProbability) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> logits = {nan, 0.0f, -kInf, 0.0f};
  EXPECT_EQ(LogprobsOf(logits, 0, 0).logprob, -kInf);
  EXPECT_EQ(LogprobsOf(logits, 2, 0).logprob, -kInf);
  EXPECT_NEAR(LogprobsOf(logits, 1, 0).logprob, std::log(0.5), 1e-6);
  const std::vector<float> masked = {-kInf, -kInf};
  const TokenLogprobs none = LogprobsOf(masked, 1, 2);
  EXPECT_EQ(none.logprob, -kInf);
  ASSERT_EQ(none.top.size(), 2u);
  EXPECT_EQ(none.top[0].logprob, -kInf);
}

TEST(DrawTokenTest, TheSampledTokenWithItsLogprobsOnlyWhenAsked) {
  const std::vector<float> logits = MakeLogits(1000, 3);
  const std::vector<int32_t> previous = {1, 2, 3};
  Sampler sampler;
  SamplingParams params{.temperature = 0.8f, .seed = 9};
  const DrawnToken plain = DrawToken(sampler, params, logits, previous, 3);
  EXPECT_EQ(plain.token, Sample(params, logits, previous, 3));
  EXPECT_FALSE(plain.logprobs.has_value());
  params.logprobs = 2;
  const DrawnToken reported = DrawToken(sampler, params, logits, previous, 3);
  EXPECT_EQ(reported.token, plain.token);
  ASSERT_TRUE(reported.logprobs.has_value());
  const TokenLogprobs expected = LogprobsOf(logits, plain.token, 2);
  EXPECT_EQ(reported.logprobs->logprob, expected.logprob);
  ASSERT_EQ(reported.logprobs->top.size(), 2u);
  EXPECT_EQ(reported.logprobs->top[0].id, expected.top[0].id);
}

// ---------------------------------------------------------------------------------------------
// Logit bias.

TEST(LogitBiasTest, BansAndForcesTokens) {
  const std::vector<float> logits = MakeLogits(1000, 21);
  const SamplingParams greedy{.temperature = 0.0f};
  const int32_t best = Sample(greedy, logits, {}, 0);
  SamplingParams banned = greedy;
  banned.logit_bias = {{.token = best, .bias = -100.0f}};
  EXPECT_NE(Sample(banned, logits, {}, 0), best);
  SamplingParams forced{.temperature = 1.0f, .seed = 3};
  forced.logit_bias = {{.token = 777, .bias = 100.0f}};
  for (int64_t position = 0; position < 20; ++position) {
    EXPECT_EQ(Sample(forced, logits, {}, position), 777);
  }
  // The input is left as it was.
  EXPECT_EQ(logits, MakeLogits(1000, 21));
}

// llama.cpp's order: the bias first, then the penalties. Token 0 (logit 1, seen before) gets +3
// and the repetition penalty 2: (1 + 3) / 2 = 2 < 2.5, token 1 wins; penalizing first would give
// 1 / 2 + 3 = 3.5 and token 0.
TEST(LogitBiasTest, ComesBeforeThePenalties) {
  const std::vector<float> logits = {1.0f, 2.5f, 0.0f};
  SamplingParams params{.temperature = 0.0f, .repetition_penalty = 2.0f};
  params.logit_bias = {{.token = 0, .bias = 3.0f}};
  const std::vector<int32_t> previous = {0};
  EXPECT_EQ(Sample(params, logits, previous, 1), 1);
}

// ---------------------------------------------------------------------------------------------
// Validation.

constexpr int32_t kVocab = 100;

absl::Status Validate(const SamplingParams& params) {
  return ValidateSamplingParams(params, kVocab);
}

auto InvalidNaming(const std::string& field) {
  return AllOf(::testing::Property(&absl::Status::code, absl::StatusCode::kInvalidArgument),
               ::testing::Property(&absl::Status::message, HasSubstr(field)));
}

TEST(ValidateSamplingParamsTest, DefaultsAndBoundaryValuesAreValid) {
  EXPECT_TRUE(Validate({}).ok());
  EXPECT_TRUE(Validate({.temperature = 0.0f,
                        .top_k = 1000,
                        .top_p = 1.0f,
                        .min_p = 1.0f,
                        .repetition_penalty = 0.5f,
                        .frequency_penalty = -2.0f,
                        .presence_penalty = 2.0f,
                        .penalty_last_n = -1,
                        .max_tokens = 1,
                        .stop_token_ids = {0, 99},
                        .stop_strings = std::vector<std::string>(16, "x"),
                        .logprobs = kMaxLogprobs})
                  .ok());
  EXPECT_TRUE(Validate({.logprobs = 0}).ok());
}

TEST(ValidateSamplingParamsTest, RejectsEachBadFieldByName) {
  const float nan = std::nanf("");
  EXPECT_THAT(Validate({.temperature = -0.1f}), InvalidNaming("temperature"));
  EXPECT_THAT(Validate({.temperature = nan}), InvalidNaming("temperature"));
  EXPECT_THAT(Validate({.temperature = kInf}), InvalidNaming("temperature"));
  EXPECT_THAT(Validate({.top_k = -1}), InvalidNaming("top_k"));
  EXPECT_THAT(Validate({.top_p = 0.0f}), InvalidNaming("top_p"));
  EXPECT_THAT(Validate({.top_p = 1.01f}), InvalidNaming("top_p"));
  EXPECT_THAT(Validate({.top_p = nan}), InvalidNaming("top_p"));
  EXPECT_THAT(Validate({.min_p = -0.01f}), InvalidNaming("min_p"));
  EXPECT_THAT(Validate({.min_p = 1.5f}), InvalidNaming("min_p"));
  EXPECT_THAT(Validate({.min_p = nan}), InvalidNaming("min_p"));
  EXPECT_THAT(Validate({.repetition_penalty = 0.0f}), InvalidNaming("repetition_penalty"));
  EXPECT_THAT(Validate({.repetition_penalty = -1.0f}), InvalidNaming("repetition_penalty"));
  EXPECT_THAT(Validate({.repetition_penalty = nan}), InvalidNaming("repetition_penalty"));
  EXPECT_THAT(Validate({.frequency_penalty = 2.5f}), InvalidNaming("frequency_penalty"));
  EXPECT_THAT(Validate({.frequency_penalty = nan}), InvalidNaming("frequency_penalty"));
  EXPECT_THAT(Validate({.presence_penalty = -2.01f}), InvalidNaming("presence_penalty"));
  EXPECT_THAT(Validate({.presence_penalty = nan}), InvalidNaming("presence_penalty"));
  EXPECT_THAT(Validate({.penalty_last_n = -2}), InvalidNaming("penalty_last_n"));
  EXPECT_THAT(Validate({.max_tokens = 0}), InvalidNaming("max_tokens"));
  EXPECT_THAT(Validate({.stop_token_ids = {3, 100}}), InvalidNaming("stop_token_ids[1]"));
  EXPECT_THAT(Validate({.stop_token_ids = {-1}}), InvalidNaming("stop_token_ids[0]"));
  EXPECT_THAT(Validate({.stop_strings = std::vector<std::string>(17, "x")}),
              InvalidNaming("stop_strings"));
  EXPECT_THAT(Validate({.stop_strings = {"ok", ""}}), InvalidNaming("stop_strings[1]"));
  EXPECT_THAT(Validate({.stop_strings = {std::string(kMaxStopStringBytes + 1, 'x')}}),
              InvalidNaming("stop_strings[0]"));
  EXPECT_TRUE(Validate({.stop_strings = {std::string(kMaxStopStringBytes, 'x')}}).ok());
  EXPECT_THAT(Validate({.logprobs = -2}), InvalidNaming("logprobs"));
  EXPECT_THAT(Validate({.logit_bias = {{.token = 100, .bias = 1.0f}}}),
              InvalidNaming("logit_bias[0] token"));
  EXPECT_THAT(Validate({.logit_bias = {{.token = 1, .bias = 1.0f}, {.token = -1, .bias = 1.0f}}}),
              InvalidNaming("logit_bias[1] token"));
  EXPECT_THAT(Validate({.logit_bias = {{.token = 1, .bias = 100.5f}}}),
              InvalidNaming("logit_bias[0] bias"));
  EXPECT_THAT(Validate({.logit_bias = {{.token = 1, .bias = nan}}}),
              InvalidNaming("logit_bias[0] bias"));
  EXPECT_THAT(Validate({.logit_bias = {{.token = 4, .bias = 1.0f}, {.token = 4, .bias = 2.0f}}}),
              InvalidNaming("logit_bias names token 4 twice"));
  EXPECT_THAT(Validate({.logit_bias = std::vector<LogitBias>(kMaxLogitBiasTokens + 1)}),
              InvalidNaming("logit_bias has"));
  EXPECT_TRUE(
      Validate({.logit_bias = {{.token = 99, .bias = -100.0f}, {.token = 0, .bias = 100.0f}}})
          .ok());
  EXPECT_THAT(Validate({.logprobs = kMaxLogprobs + 1}), InvalidNaming("logprobs"));
}

TEST(ValidateSamplingParamsTest, MessageCarriesTheValue) {
  const absl::Status status = Validate({.top_p = 1.5f});
  EXPECT_THAT(std::string(status.message()), AllOf(HasSubstr("top_p"), HasSubstr("1.5")));
  EXPECT_THAT(std::string(Validate({.max_tokens = -7}).message()), HasSubstr("-7"));
}

TEST(ValidateSamplingParamsTest, RejectsEmptyVocab) {
  EXPECT_THAT(ValidateSamplingParams({}, 0), InvalidNaming("n_vocab"));
}

}  // namespace
}  // namespace baton::engine
