#include "engine/expert_routing.h"

#include <algorithm>
#include <cmath>
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

}  // namespace

void ExpertRouting::Route(const float *logits, const float *shared_logits, int64_t n,
                          const ExpertsSpec &spec) {
  const int32_t used = spec.used;
  const bool shared = spec.n_ff_shared > 0;
  n_tokens = n;
  slots = used + (shared ? 1 : 0);
  slot_row.assign(n * slots, 0);
  slot_weight.assign(n * slots, 0.0f);
  std::vector<int32_t> chosen(n * used);
  std::vector<float> probs(spec.count);
  std::vector<int32_t> order(spec.count);
  for (int64_t i = 0; i < n; ++i) {
    Softmax(logits + i * spec.count, spec.count, probs.data());
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + used, order.end(), [&](int32_t a, int32_t b) {
      return probs[a] > probs[b] || (probs[a] == probs[b] && a < b);
    });
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
    if (shared) {
      slot_weight[i * slots + used] = 1.0f / (1.0f + std::exp(-shared_logits[i]));
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
