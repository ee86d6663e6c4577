#include "engine/expert_routing.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

namespace baton::engine {
namespace {

// GGML's soft_max of one row: exp(x - max) in f32, their sum in double, scaled
// by 1 / sum.
void Softmax(const float *x, int32_t n, float *p) {
  const float max = *std::max_element(x, x + n);
  double sum = 0;
  for (int32_t i = 0; i < n; ++i) sum += p[i] = std::exp(x[i] - max);
  const float scale = static_cast<float>(1.0 / sum);
  for (int32_t i = 0; i < n; ++i) p[i] *= scale;
}

// GGML's sigmoid of each value: 1 / (1 + exp(-x)) in f32.
void Sigmoid(const float *x, int32_t n, float *p) {
  for (int32_t i = 0; i < n; ++i) p[i] = 1.0f / (1.0f + std::exp(-x[i]));
}

// The `k` largest of score[order[0..n)], moved to order's front in descending order (ties to the
// lower index).
void TopK(const float *score, int32_t k, std::vector<int32_t> &order) {
  std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int32_t a, int32_t b) {
    return score[a] > score[b] || (score[a] == score[b] && a < b);
  });
}

// Sets the score of every expert outside the `groups_used` best of `groups` equal groups to
// -inf; a group's score is the sum of its two best.
void KeepBestGroups(int32_t groups, int32_t groups_used, std::vector<float> &score) {
  const int32_t per_group = static_cast<int32_t>(score.size()) / groups;
  std::vector<float> group_score(groups);
  std::vector<int32_t> order(per_group);
  for (int32_t g = 0; g < groups; ++g) {
    const float *s = score.data() + g * per_group;
    std::iota(order.begin(), order.end(), 0);
    TopK(s, std::min(2, per_group), order);
    group_score[g] = per_group < 2 ? s[order[0]] : s[order[0]] + s[order[1]];
  }
  std::vector<int32_t> group_order(groups);
  std::iota(group_order.begin(), group_order.end(), 0);
  TopK(group_score.data(), groups_used, group_order);
  std::vector<bool> kept(groups, false);
  for (int32_t j = 0; j < groups_used; ++j) kept[group_order[j]] = true;
  for (int32_t g = 0; g < groups; ++g) {
    if (kept[g]) continue;
    std::fill_n(score.begin() + g * per_group, per_group,
                -std::numeric_limits<float>::infinity());
  }
}

}  // namespace

void ExpertRouting::Route(const float *logits, const float *shared_logits,
                          const float *selection_bias, int64_t n, const ExpertsSpec &spec) {
  const int32_t used = spec.used;
  const bool shared = spec.n_ff_shared > 0;
  n_tokens = n;
  slots = used + (shared ? 1 : 0);
  slot_row.assign(n * slots, 0);
  slot_weight.assign(n * slots, 0.0f);
  std::vector<int32_t> chosen(n * used);
  std::vector<float> probs(spec.count);
  std::vector<float> choice(spec.count);
  std::vector<int32_t> order(spec.count);
  for (int64_t i = 0; i < n; ++i) {
    if (spec.gating == ExpertGating::kSigmoid) {
      Sigmoid(logits + i * spec.count, spec.count, probs.data());
    } else {
      Softmax(logits + i * spec.count, spec.count, probs.data());
    }
    choice = probs;
    if (spec.selection_bias) {
      for (int32_t e = 0; e < spec.count; ++e) choice[e] += selection_bias[e];
    }
    if (spec.groups > 1) KeepBestGroups(spec.groups, spec.groups_used, choice);
    std::iota(order.begin(), order.end(), 0);
    TopK(choice.data(), used, order);
    float sum = 0;
    for (int32_t j = 0; j < used; ++j) {
      chosen[i * used + j] = order[j];
      slot_weight[i * slots + j] = probs[order[j]];
      sum += probs[order[j]];
    }
    if (spec.normalize_weights) {
      sum = std::max(sum, 6.103515625e-5f);
      for (int32_t j = 0; j < used; ++j) slot_weight[i * slots + j] /= sum;
    }
    if (spec.weights_scale != 1.0f) {
      for (int32_t j = 0; j < used; ++j) slot_weight[i * slots + j] *= spec.weights_scale;
    }
    if (shared) {
      slot_weight[i * slots + used] =
          spec.shared_gate ? 1.0f / (1.0f + std::exp(-shared_logits[i])) : 1.0f;
      slot_row[i * slots + used] = n * used + i;
    }
  }
  // Group by expert (a counting sort: tokens in order within each expert).
  first_row.assign(spec.count + 1, 0);
  for (int32_t e : chosen) ++first_row[e + 1];
  std::partial_sum(first_row.begin(), first_row.end(), first_row.begin());
  token_of_row.assign(n * used, 0);
  std::vector<int64_t> next(first_row.begin(), first_row.end() - 1);
  for (int64_t i = 0; i < n; ++i) {
    for (int32_t j = 0; j < used; ++j) {
      const int64_t row = next[chosen[i * used + j]]++;
      token_of_row[row] = i;
      slot_row[i * slots + j] = row;
    }
  }
}

}  // namespace baton::engine
