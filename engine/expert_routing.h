// The routing of a mixture-of-experts block (layer_spec.h's ExpertsSpec), on the host: from the
// router's logits, each token's experts and weights, and the tokens grouped by expert so that
// each expert's matrices are multiplied once per batch, over all of its tokens.
//
// Arithmetic as GGML's (llama.cpp's build_moe_ffn): softmax with the maximum subtracted, its sum
// accumulated in double, or each logit's sigmoid; the selection bias added for choosing only;
// the best groups by the sum of their two best; the `used` most probable experts (ties to the
// lower index); their probabilities, renormalized by their f32 sum (at least 2^-14) where the
// spec says so, then scaled.
//
// Thread-safety: a value type; Route() rewrites it.
#ifndef BATON_ENGINE_EXPERT_ROUTING_H_
#define BATON_ENGINE_EXPERT_ROUTING_H_

#include <cstdint>
#include <vector>

#include "engine/layer_spec.h"

namespace baton::engine {

struct ExpertRouting {
  int64_t n_tokens = 0;
  int32_t slots = 0;  // per token: spec.used, plus 1 for a shared expert

  // The tokens each expert runs, in expert order: expert e's are token_of_row[first_row[e],
  // first_row[e + 1]). [n_tokens * used] and [count + 1].
  std::vector<int64_t> token_of_row;
  std::vector<int64_t> first_row;
  // Per token and slot [n_tokens * slots]: the row of the experts' outputs (in the order of
  // token_of_row; a shared expert's output for token i is row n_tokens * used + i) and its
  // weight. Slots in order of probability, the shared expert last.
  std::vector<int64_t> slot_row;
  std::vector<float> slot_weight;

  // logits [n_tokens, spec.count]; shared_logits [n_tokens] where spec.n_ff_shared > 0 and
  // spec.shared_gate (else ignored); selection_bias [spec.count] where spec.selection_bias (else
  // ignored). spec.used must be in [1, spec.count], spec.groups divide spec.count and
  // groups_used in [1, groups] with groups_used * count / groups >= used.
  void Route(const float* logits, const float* shared_logits, const float* selection_bias,
             int64_t n_tokens, const ExpertsSpec& spec);
};

}  // namespace baton::engine

#endif  // BATON_ENGINE_EXPERT_ROUTING_H_
