#include "engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>

#include "absl/log/check.h"
#include "engine/draw_weights.h"

namespace baton::engine {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
constexpr uint64_t kGolden = 0x9E3779B97F4A7C15ull;

// The SplitMix64 output function: a bijective 64-bit mixer with full avalanche.
uint64_t Mix64(uint64_t x) {
  x ^= x >> 30;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 27;
  x *= 0x94D049BB133111EBull;
  x ^= x >> 31;
  return x;
}


bool PenaltiesOff(const SamplingParams& params) {
  return params.penalty_last_n == 0 ||
         (params.repetition_penalty == 1.0f && params.frequency_penalty == 0.0f &&
          params.presence_penalty == 0.0f);
}

// `window` is scratch; on return it holds the sorted penalty window.
void ApplyPenaltiesImpl(const SamplingParams& params, std::span<const int32_t> previous_tokens,
                        std::span<float> logits, std::vector<int32_t>& window) {
  if (PenaltiesOff(params) || previous_tokens.empty()) return;
  size_t n_window = previous_tokens.size();
  if (params.penalty_last_n > 0) {
    n_window = std::min(n_window, static_cast<size_t>(params.penalty_last_n));
  }
  const auto recent = previous_tokens.last(n_window);
  window.assign(recent.begin(), recent.end());
  std::sort(window.begin(), window.end());
  const int64_t n_vocab = static_cast<int64_t>(logits.size());
  for (size_t i = 0; i < window.size();) {
    const int32_t id = window[i];
    size_t j = i;
    while (j < window.size() && window[j] == id) ++j;
    const int64_t count = static_cast<int64_t>(j - i);
    i = j;
    if (id < 0 || id >= n_vocab) continue;
    float& logit = logits[id];
    logit = logit > 0.0f ? logit / params.repetition_penalty : logit * params.repetition_penalty;
    logit -= static_cast<float>(count) * params.frequency_penalty + params.presence_penalty;
  }
}

// The largest SanitizeLogit(logit) of `logits`, in 16 independent lanes the compiler vectorizes (one
// running maximum would be a serial chain).
float SanitizedMax(std::span<const float> logits) {
  constexpr size_t kLanes = 16;
  float lanes[kLanes];
  std::fill(lanes, lanes + kLanes, kNegInf);
  size_t i = 0;
  for (; i + kLanes <= logits.size(); i += kLanes) {
    for (size_t j = 0; j < kLanes; ++j) lanes[j] = std::max(lanes[j], SanitizeLogit(logits[i + j]));
  }
  float best = kNegInf;
  for (; i < logits.size(); ++i) best = std::max(best, SanitizeLogit(logits[i]));
  for (const float lane : lanes) best = std::max(best, lane);
  return best;
}

// How many logits are neither NaN nor -inf (masked).
int64_t CountUnmasked(std::span<const float> logits) {
  int64_t count = 0;
  for (const float logit : logits) count += SanitizeLogit(logit) != kNegInf;
  return count;
}

// The block-wise scans: block b is logits [b * kBlock, (b + 1) * kBlock), the last one shorter.
constexpr size_t kBlock = 256;
size_t BlockCount(std::span<const float> logits) { return (logits.size() + kBlock - 1) / kBlock; }
std::span<const float> Block(std::span<const float> logits, size_t b) {
  return logits.subspan(b * kBlock, std::min(kBlock, logits.size() - b * kBlock));
}

// The first index of the largest SanitizeLogit(logit); 0 when every logit is NaN or -inf. The maximum
// of each block of kBlock, then a scan of the first block that holds the largest.
int32_t GreedyToken(std::span<const float> logits) {
  float best = kNegInf;
  size_t best_block = 0;
  for (size_t b = 0; b < BlockCount(logits); ++b) {
    const float block_max = SanitizedMax(Block(logits, b));
    if (block_max > best) {
      best = block_max;
      best_block = b;
    }
  }
  size_t i = best_block * kBlock;
  while (SanitizeLogit(logits[i]) != best) ++i;
  return static_cast<int32_t>(i);
}

// Whether top-k can leave out a logit: 0 < k < the vocabulary.
bool TopKApplies(const SamplingParams& params, size_t n_vocab) {
  return params.top_k > 0 && static_cast<size_t>(params.top_k) < n_vocab;
}

// Orders by logit, highest first; the lower id first among equal logits. Candidates hold no NaN.
template <typename T>
bool Before(const T& a, const T& b) {
  return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
}

// The weights' sum (in double), a block of kBlock at a time: block_sums[b] is block b's.
double BlockSums(std::span<const float> weights, std::vector<double>& block_sums) {
  const size_t n_blocks = BlockCount(weights);
  block_sums.resize(n_blocks);
  double total = 0.0;
  for (size_t b = 0; b < n_blocks; ++b) {
    const std::span<const float> block = Block(weights, b);
    double lanes[4] = {0.0, 0.0, 0.0, 0.0};  // independent chains the compiler can overlap
    size_t j = 0;
    for (; j + 4 <= block.size(); j += 4) {
      for (size_t k = 0; k < 4; ++k) lanes[k] += block[j + k];
    }
    for (; j < block.size(); ++j) lanes[0] += block[j];
    block_sums[b] = (lanes[0] + lanes[1]) + (lanes[2] + lanes[3]);
    total += block_sums[b];
  }
  return total;
}

// The index that a draw `u` in [0, 1) picks from `weights` (one of them positive): the first
// whose running sum (in double, in order) passes u * their total. The sums are taken a block at a
// time, so that only the block the draw lands in is walked weight by weight.
size_t DrawIndex(std::span<const float> weights, double u, std::vector<double>& block_sums) {
  const size_t n_blocks = BlockCount(weights);
  const double target = u * BlockSums(weights, block_sums);
  double cumulative = 0.0;
  for (size_t b = 0; b < n_blocks; ++b) {
    if (block_sums[b] == 0.0) continue;
    if (target < cumulative + block_sums[b]) {
      double running = cumulative;
      for (size_t i = b * kBlock; i < b * kBlock + Block(weights, b).size(); ++i) {
        if (weights[i] == 0.0f) continue;
        running += weights[i];
        if (target < running) return i;
      }
    }
    cumulative += block_sums[b];
  }
  // Only reached when rounding puts `target` at the very top of the range: the last positive.
  size_t last = weights.size() - 1;
  while (last > 0 && weights[last] == 0.0f) --last;
  return last;
}

}  // namespace

double CounterUniform(uint64_t seed, int64_t position) {
  // SplitMix64's stream for a mixed seed, evaluated at index `position` directly.
  const uint64_t state = Mix64(seed) + (static_cast<uint64_t>(position) + 1) * kGolden;
  return static_cast<double>(Mix64(state) >> 11) * 0x1.0p-53;
}

void ApplyPenalties(const SamplingParams& params, std::span<const int32_t> previous_tokens,
                    std::span<float> logits) {
  std::vector<int32_t> window;
  ApplyPenaltiesImpl(params, previous_tokens, logits, window);
}

size_t Sampler::SelectCandidates(std::span<const float> logits, int32_t top_k) {
  if (top_k > 0 && SelectTopKByBlocks(logits, top_k)) return candidates_.size();
  const int32_t n_vocab = static_cast<int32_t>(logits.size());
  candidates_.resize(n_vocab);
  Candidate* const all = candidates_.data();
  int32_t n_candidates = 0;
  for (int32_t i = 0; i < n_vocab; ++i) {
    const float logit = SanitizeLogit(logits[i]);
    all[n_candidates] = {i, logit};
    n_candidates += logit != kNegInf;
  }
  candidates_.resize(n_candidates);
  if (top_k <= 0 || static_cast<size_t>(top_k) >= candidates_.size()) return 0;
  KeepBest(top_k);
  return candidates_.size();
}

void Sampler::KeepBest(size_t k) {
  // Select the k best in O(n), then order just those.
  const auto before = [](const Candidate& a, const Candidate& b) { return Before(a, b); };
  std::nth_element(candidates_.begin(), candidates_.begin() + (k - 1), candidates_.end(), before);
  candidates_.resize(k);
  std::sort(candidates_.begin(), candidates_.end(), before);
}

// The k-th largest of the blocks' maxima is a lower bound of the k-th largest logit (the k
// blocks whose maxima reach it hold k logits at least as large), so only the blocks whose
// maximum reaches the bound can hold the k best, and only their logits at or above it: the same
// k, in the same order, from a fraction of the vocabulary. It serves where top-k applies (more
// unmasked logits than k) and k blocks have an unmasked logit.
bool Sampler::SelectTopKByBlocks(std::span<const float> logits, int32_t top_k) {
  const size_t k = static_cast<size_t>(top_k);
  const size_t n_blocks = BlockCount(logits);
  if (k > n_blocks) return false;
  block_max_.resize(n_blocks);
  int64_t unmasked = 0;
  for (size_t b = 0; b < n_blocks; ++b) {
    block_max_[b] = SanitizedMax(Block(logits, b));
    unmasked += CountUnmasked(Block(logits, b));
  }
  if (unmasked <= top_k) return false;
  block_order_.assign(block_max_.begin(), block_max_.end());
  std::nth_element(block_order_.begin(), block_order_.begin() + (k - 1), block_order_.end(),
                   std::greater<float>());
  const float bound = block_order_[k - 1];
  if (bound == kNegInf) return false;
  candidates_.clear();
  for (size_t b = 0; b < n_blocks; ++b) {
    if (block_max_[b] < bound) continue;
    const std::span<const float> block = Block(logits, b);
    for (size_t j = 0; j < block.size(); ++j) {
      const float logit = SanitizeLogit(block[j]);
      if (logit >= bound) candidates_.push_back({static_cast<int32_t>(b * kBlock + j), logit});
    }
  }
  KeepBest(k);
  return true;
}

size_t Sampler::KeepNucleus(float top_p, size_t n_sorted) {
  const auto before = [](const Candidate& a, const Candidate& b) { return Before(a, b); };
  const auto begin = candidates_.begin();
  float max = kNegInf;
  for (const Candidate& c : candidates_) max = std::max(max, c.logit);
  double sum = 0.0;
  for (const Candidate& c : candidates_) sum += DrawWeight(c.logit, max, 1.0f);
  const double target = static_cast<double>(top_p) * sum;
  double cumulative = 0.0;
  size_t keep = 0;  // stays 0 when rounding leaves the target unreached: keep all
  for (size_t i = 0, batch = 64; i < candidates_.size() && keep == 0; batch *= 4) {
    const size_t end = std::min(candidates_.size(), std::max(n_sorted, i + batch));
    if (end > n_sorted) {
      if (end < candidates_.size()) {
        std::nth_element(begin + n_sorted, begin + (end - 1), candidates_.end(), before);
      }
      std::sort(begin + n_sorted, begin + end, before);
      n_sorted = end;
    }
    for (; i < end && keep == 0; ++i) {
      cumulative += DrawWeight(candidates_[i].logit, max, 1.0f);
      if (cumulative >= target) keep = i + 1;
    }
  }
  if (keep > 0) candidates_.resize(keep);
  return std::min(n_sorted, keep);
}

// The nucleus lies among the logits closest to the largest. A histogram of the weights by
// distance to the largest logit (kBucketsPerUnit buckets a unit, the last one open) finds the
// bucket where the running sum from the top reaches the target; only the logits up to the bucket
// after it (a margin for the histogram's rounding) are ordered and walked, as KeepNucleus would.
size_t Sampler::SelectNucleusOfAll(std::span<const float> logits, float top_p) {
  constexpr int kBuckets = 64;
  constexpr float kBucketsPerUnit = 2.0f;
  candidates_.clear();
  const float max = SanitizedMax(logits);
  if (max == kNegInf) return 0;  // every logit masked
  weights_.resize(logits.size());
  FillDrawWeights(logits, max, 1.0f, weights_);
  const double target = static_cast<double>(top_p) * BlockSums(weights_, block_sums_);
  auto bucket_of = [&](float logit) {
    return static_cast<int>(std::min((max - logit) * kBucketsPerUnit, kBuckets - 1.0f));
  };
  double histogram[kBuckets] = {};
  for (size_t i = 0; i < logits.size(); ++i) {
    if (weights_[i] > 0.0f) histogram[bucket_of(SanitizeLogit(logits[i]))] += weights_[i];
  }
  int last = kBuckets - 1;  // the last bucket whose logits are ordered
  double running = 0.0;
  for (int b = 0; b < kBuckets; ++b) {
    running += histogram[b];
    if (running >= target) {
      last = std::min(b + 1, kBuckets - 1);
      break;
    }
  }
  for (size_t i = 0; i < logits.size(); ++i) {
    const float logit = SanitizeLogit(logits[i]);
    if (logit != kNegInf && bucket_of(logit) <= last) {
      candidates_.push_back({static_cast<int32_t>(i), logit});
    }
  }
  const auto before = [](const Candidate& a, const Candidate& b) { return Before(a, b); };
  std::sort(candidates_.begin(), candidates_.end(), before);
  double cumulative = 0.0;
  for (size_t i = 0; i < candidates_.size(); ++i) {
    cumulative += weights_[candidates_[i].id];
    if (cumulative >= target) {
      candidates_.resize(i + 1);
      return i + 1;
    }
  }
  // The histogram's rounding put the boundary past the logits taken: judge them all.
  SelectCandidates(logits, 0);
  return KeepNucleus(top_p, 0);
}

int32_t Sampler::Sample(const SamplingParams& params, std::span<const float> logits,
                        std::span<const int32_t> previous_tokens, int64_t position) {
  CHECK(!logits.empty()) << "Sampler::Sample needs at least one logit";
  const bool greedy = params.temperature == 0.0f || params.top_k == 1;

  // Biases, then penalties, then SanitizeLogit (a penalty can turn a huge logit into +inf).
  std::span<const float> penalized = logits;
  const bool penalize = !PenaltiesOff(params) && !previous_tokens.empty();
  if (penalize || !params.logit_bias.empty()) {
    logits_.assign(logits.begin(), logits.end());
    for (const LogitBias& b : params.logit_bias) {
      if (b.token >= 0 && static_cast<size_t>(b.token) < logits_.size()) logits_[b.token] += b.bias;
    }
    if (penalize) ApplyPenaltiesImpl(params, previous_tokens, logits_, window_);
    penalized = logits_;
  }
  if (greedy) return GreedyToken(penalized);
  const bool filtered =
      TopKApplies(params, logits.size()) || params.top_p < 1.0f || params.min_p > 0.0f;
  if (!filtered) return DrawFromAll(params, penalized, position);

  // candidates_[0, n_sorted) are the best n_sorted candidates, in order.
  size_t n_sorted = 0;
  if (params.top_p < 1.0f && !TopKApplies(params, logits.size())) {
    n_sorted = SelectNucleusOfAll(penalized, params.top_p);
  } else {
    n_sorted = SelectCandidates(penalized, params.top_k);
    if (params.top_p < 1.0f && candidates_.size() > 1) {
      n_sorted = KeepNucleus(params.top_p, n_sorted);
    }
  }
  if (candidates_.empty()) return 0;

  // Min-p: p >= min_p * p_max  <=>  logit - max_logit >= log(min_p). Order is preserved.
  if (params.min_p > 0.0f && candidates_.size() > 1) {
    double max = candidates_.front().logit;
    if (n_sorted == 0) {
      for (const Candidate& c : candidates_) max = std::max(max, static_cast<double>(c.logit));
    }
    const double log_min_p = std::log(static_cast<double>(params.min_p));
    std::erase_if(candidates_, [&](const Candidate& c) {
      return static_cast<double>(c.logit) - max < log_min_p;
    });
  }

  if (candidates_.size() == 1) return candidates_.front().id;

  // Temperature, softmax and one draw, in candidate order.
  float max = kNegInf;
  for (const Candidate& c : candidates_) max = std::max(max, c.logit);
  const float inv_temperature = 1.0f / params.temperature;  // +inf for a subnormal temperature
  weights_.resize(candidates_.size());
  for (size_t i = 0; i < candidates_.size(); ++i) {
    weights_[i] = DrawWeight(candidates_[i].logit, max, inv_temperature);
  }
  return candidates_[DrawIndex(weights_, CounterUniform(params.seed, position), block_sums_)].id;
}

int32_t Sampler::DrawFromAll(const SamplingParams& params, std::span<const float> logits,
                             int64_t position) {
  const float max = SanitizedMax(logits);
  if (max == kNegInf) return 0;  // every logit masked
  weights_.resize(logits.size());
  FillDrawWeights(logits, max, 1.0f / params.temperature, weights_);
  return static_cast<int32_t>(
      DrawIndex(weights_, CounterUniform(params.seed, position), block_sums_));
}

int32_t Sample(const SamplingParams& params, std::span<const float> logits,
               std::span<const int32_t> previous_tokens, int64_t position) {
  Sampler sampler;
  return sampler.Sample(params, logits, previous_tokens, position);
}

namespace {

// log(sum(exp(logit))) over the sanitized logits: what log-softmax subtracts. +inf when every
// logit is masked (then every log-probability is -inf).
double LogNormalizer(std::span<const float> logits) {
  const float max = SanitizedMax(logits);
  if (max == kNegInf) return std::numeric_limits<double>::infinity();
  return static_cast<double>(max) + std::log(SumDrawWeights(logits, max, 1.0f));
}

// Better: the higher logit, the lower id among equals.
bool MoreLikely(const TokenLogprob& a, const TokenLogprob& b) {
  return a.logprob > b.logprob || (a.logprob == b.logprob && a.id < b.id);
}

// The `k` (in [0, logits.size()]) highest sanitized logits, highest first, lower id first among
// equals, as log-probabilities. One pass keeps the best k in a heap whose top is the worst kept;
// a block of logits none above that worst one (later ids lose ties) is skipped whole.
std::vector<TokenLogprob> MostLikely(std::span<const float> logits, int32_t k,
                                     double log_normalizer) {
  constexpr size_t kBlock = 256;
  std::vector<TokenLogprob> best;  // `logprob` holds the sanitized logit until the end
  if (k == 0) return best;
  best.reserve(static_cast<size_t>(k));
  for (size_t start = 0; start < logits.size(); start += kBlock) {
    const std::span<const float> block =
        logits.subspan(start, std::min(kBlock, logits.size() - start));
    if (best.size() == static_cast<size_t>(k) && SanitizedMax(block) <= best.front().logprob) {
      continue;
    }
    for (size_t i = start; i < start + block.size(); ++i) {
      const TokenLogprob t = {static_cast<int32_t>(i), SanitizeLogit(logits[i])};
      if (best.size() < static_cast<size_t>(k)) {
        best.push_back(t);
        std::push_heap(best.begin(), best.end(), MoreLikely);
      } else if (MoreLikely(t, best.front())) {
        std::pop_heap(best.begin(), best.end(), MoreLikely);
        best.back() = t;
        std::push_heap(best.begin(), best.end(), MoreLikely);
      }
    }
  }
  std::sort_heap(best.begin(), best.end(), MoreLikely);
  for (TokenLogprob& t : best) {
    t.logprob = static_cast<float>(static_cast<double>(t.logprob) - log_normalizer);
  }
  return best;
}

}  // namespace

std::vector<TokenLogprob> TopLogprobs(std::span<const float> logits, int32_t k) {
  k = std::clamp(k, 0, static_cast<int32_t>(logits.size()));
  if (k == 0) return {};
  return MostLikely(logits, k, LogNormalizer(logits));
}

TokenLogprobs LogprobsOf(std::span<const float> logits, int32_t token, int32_t k) {
  const double log_normalizer = LogNormalizer(logits);
  return {.logprob = static_cast<float>(static_cast<double>(SanitizeLogit(logits[token])) -
                                        log_normalizer),
          .top = MostLikely(logits, std::clamp(k, 0, static_cast<int32_t>(logits.size())),
                            log_normalizer)};
}

DrawnToken DrawToken(Sampler& sampler, const SamplingParams& params, std::span<const float> logits,
                     std::span<const int32_t> previous_tokens, int64_t position) {
  DrawnToken drawn{.token = sampler.Sample(params, logits, previous_tokens, position)};
  if (params.logprobs >= 0) drawn.logprobs = LogprobsOf(logits, drawn.token, params.logprobs);
  return drawn;
}

}  // namespace baton::engine
