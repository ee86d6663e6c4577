// One rank's part of a model under tensor parallelism: the config and weights a Transformer of
// that rank runs, with a Communicator joining its results to the other ranks'
// (engine/transformer.h).
//
// Rank r of N holds, in either mode below:
//   - attention heads [r H/N, (r+1) H/N): the rows of Q (column-parallel), their biases, sinks
//     and, for latent attention, their per-head matrices; the KV heads those queries read: KV
//     heads [r Hkv/N, (r+1) Hkv/N) where N divides Hkv, else KV head r / (N / Hkv), replicated
//     on N / Hkv ranks (N must then be a multiple of Hkv); a latent cache whole on every rank;
//   - rows [r F/N, (r+1) F/N) of the dense feed-forward's gate and up (and the shared expert's);
//   - the output matrix's rows [r V/N, (r+1) V/N): its share of the vocabulary's logits,
//     all-gathered;
//   - everything else whole: the embeddings, the norms, the router and the shared expert's gate
//     (every rank routes a token the same way).
// The row-parallel products (attention output, feed-forward down) and the routed experts are
// split by the mode:
//   - kExact: rank r holds rows [r E/N, (r+1) E/N) of each row-parallel matrix (E = n_embd) and
//     of its bias; the Transformer all-gathers the product's input, computes its rows of the
//     output and all-gathers them. Experts are split by expert (expert parallelism): rank r runs
//     experts [r X/N, (r+1) X/N) whole, and their outputs are all-gathered before the weighted
//     sum. Every value is computed as the whole model computes it, so on a batch-invariant
//     backend (the CPU's) the logits are the whole model's bit for bit.
//   - kPartialSums (Megatron-LM's, vLLM's): rank r holds the columns of a row-parallel matrix
//     that its share of the input feeds (a copy: one row's columns of a quantized matrix are not
//     contiguous; the split must fall on the weight type's blocks, 32 values or the K-quants'
//     256), so its product is a partial sum, all-reduced, and its bias is rank 0's alone. Experts
//     are split by tensor (each expert's gate and up rows, down columns). Half the traffic of
//     kExact per row-parallel product on a dense model; the sum's order is not one rank's, so the
//     logits agree within rounding, which 8-bit activations carry into the next layers.
//
// Rows are views of the model's weights (rank 0's share of a tied output lies at the embeddings'
// address: backends tell a registered matrix by its address and shape); the copies (partial
// sums' columns, experts' bias rows) are owned by the shard. FAILED_PRECONDITION says which count does not divide.
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

enum class TensorParallelMode {
  kExact,        // outputs split by rows, inputs gathered; experts by expert: the whole model's bits
  kPartialSums,  // Megatron-LM's: partial sums all-reduced; experts by tensor
};

struct ModelShard {
  int32_t rank = 0;
  int32_t size = 1;
  TensorParallelMode mode = TensorParallelMode::kExact;
  // This rank's heads, KV heads and feed-forward widths (the experts' only in kPartialSums);
  // n_embd, n_vocab and the experts' count whole.
  ModelConfig config;
  ModelWeights weights;  // output: this rank's rows of the vocabulary
  // The copies the weights point into, where they are not the model's own memory.
  std::vector<std::unique_ptr<uint8_t[]>> owned_bytes;
  std::vector<std::unique_ptr<float[]>> owned_floats;
};

// Rank `rank` of `size` (size 1: the whole model, as views). INVALID_ARGUMENT for a rank outside
// [0, size); FAILED_PRECONDITION naming the count that `size` does not divide, or (partial
// sums) the matrix whose columns would split inside a block.
absl::StatusOr<std::unique_ptr<ModelShard>> ShardModel(
    const ModelConfig& config, const ModelWeights& weights, int32_t rank, int32_t size,
    TensorParallelMode mode = TensorParallelMode::kExact);

// The first of the KV heads rank `rank` of `size` holds (it holds the sharded config's
// n_head_kv of them), for the whole model's `config`.
int32_t FirstKvHead(const ModelConfig& config, int32_t rank, int32_t size);

// [begin, end) of rank `rank`'s equal share of `total` things (the vocabulary's rows): the
// first total * rank / size to total * (rank + 1) / size.
struct ShardRange {
  int64_t begin = 0;
  int64_t end = 0;
};
ShardRange ShareOf(int64_t total, int32_t rank, int32_t size);

}  // namespace baton::engine

#endif  // BATON_ENGINE_MODEL_SHARD_H_
