// One rank's part of a model under tensor parallelism (Megatron-LM's split, as vLLM runs it):
// the config and weights a Transformer of that rank runs, with a Communicator joining its
// partial results to the other ranks' (engine/transformer.h).
//
// Rank r of N holds:
//   - attention heads [r H/N, (r+1) H/N): the rows of Q (column-parallel), their biases, sinks
//     and, for latent attention, their per-head matrices; the KV heads those queries read: KV
//     heads [r Hkv/N, (r+1) Hkv/N) where N divides Hkv, else KV head r / (N / Hkv), replicated
//     on N / Hkv ranks (N must then be a multiple of Hkv); a latent cache whole on every rank;
//   - the columns of the attention output matrix that its heads produce (row-parallel: its
//     product is a partial sum, all-reduced);
//   - rows [r F/N, (r+1) F/N) of the feed-forward's gate and up, the same columns of down
//     (row-parallel); each expert of a mixture is split the same way (split by tensor: every
//     rank runs every expert's slice, the router and the shared expert's gate whole on every
//     rank, so every rank routes a token the same way);
//   - the output matrix's rows [r V/N, (r+1) V/N): its share of the vocabulary's logits,
//     all-gathered;
//   - everything else whole: the embeddings, the norms, the router.
// A bias added after a row-parallel product (attention output, experts' down) is held by rank 0
// alone, so that the all-reduce adds it once.
//
// Rows are views of the model's weights; the row-parallel columns are copies (one row's columns
// of a quantized matrix are not contiguous), owned by the shard, as is rank 0's share of a tied
// output (a backend knows a matrix by its address, which would be the embeddings'). A split must fall on the
// weight type's block boundaries (32 values, 256 for the K-quants); FAILED_PRECONDITION says
// which count does not divide otherwise.
//
// Thread-safety: immutable once made; the model's weights must outlive it.
#ifndef BATON_ENGINE_MODEL_SHARD_H_
#define BATON_ENGINE_MODEL_SHARD_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/model_config.h"
#include "engine/model_weights.h"

namespace baton::engine {

struct ModelShard {
  int32_t rank = 0;
  int32_t size = 1;
  ModelConfig config;    // this rank's heads, KV heads and feed-forward widths; n_vocab whole
  ModelWeights weights;  // output: this rank's rows of the vocabulary
  // The copies the weights point into, where they are not the model's own memory.
  std::vector<std::unique_ptr<uint8_t[]>> owned_bytes;
  std::vector<std::unique_ptr<float[]>> owned_floats;
};

// Rank `rank` of `size` (size 1: the whole model, as views). INVALID_ARGUMENT for a rank outside
// [0, size); FAILED_PRECONDITION naming the count that `size` does not divide.
absl::StatusOr<std::unique_ptr<ModelShard>> ShardModel(const ModelConfig& config,
                                                       const ModelWeights& weights,
                                                       int32_t rank, int32_t size);

// [begin, end) of rank `rank`'s equal share of `total` things (the vocabulary's rows): the
// first total * rank / size to total * (rank + 1) / size.
struct ShardRange {
  int64_t begin = 0;
  int64_t end = 0;
};
ShardRange ShareOf(int64_t total, int32_t rank, int32_t size);

}  // namespace baton::engine

#endif  // BATON_ENGINE_MODEL_SHARD_H_
