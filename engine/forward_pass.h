// What runs a model's forward pass over a batch of sequences: one Transformer on one backend, or
// a tensor-parallel group of them (engine/tensor_parallel_group.h). The contracts are
// Transformer's (engine/transformer.h); callers that only run passes take this.
//
// Thread-safety: one caller at a time.
#ifndef BATON_ENGINE_FORWARD_PASS_H_
#define BATON_ENGINE_FORWARD_PASS_H_

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "engine/kv_cache.h"
#include "engine/model_config.h"
#include "engine/vocab.h"

namespace baton::engine {

// One sequence's share of a forward batch: `tokens` at positions kv->n_tokens, kv->n_tokens + 1, ...
// The table must already hold blocks for kv->n_tokens + tokens.size() tokens (KvCache::Reserve);
// a pass advances kv->n_tokens.
struct SequenceInput {
  std::span<const TokenId> tokens;
  BlockTable* kv = nullptr;
  bool all_logits = false;  // logits for every new token, not only the last (perplexity)
};

// Called after layer `layer` has written the K/V of every sequence in the batch: the hand-off can
// ship that layer while the next one computes.
using LayerDoneCallback = std::function<void(int32_t layer)>;

class ForwardPass {
 public:
  virtual ~ForwardPass() = default;

  // Logits [n_out, n_vocab], n_out = sum over sequences of (all_logits ? tokens : 1), in order.
  virtual absl::Status Prefill(std::span<const SequenceInput> sequences,
                               std::vector<float>& logits,
                               const LayerDoneCallback& on_layer_done) = 0;
  absl::Status Prefill(std::span<const SequenceInput> sequences, std::vector<float>& logits) {
    return Prefill(sequences, logits, nullptr);
  }
  // As Prefill, but every sequence brings exactly one token.
  virtual absl::Status Decode(std::span<const SequenceInput> sequences,
                              std::vector<float>& logits) = 0;
  // The whole model's config.
  virtual const ModelConfig& config() const = 0;
};

}  // namespace baton::engine

#endif  // BATON_ENGINE_FORWARD_PASS_H_
