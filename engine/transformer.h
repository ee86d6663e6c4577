// The forward pass of a decoder over a batch of sequences: every architecture's layers are the
// same shared blocks (attention, feed-forward, RMSNorms around them), each layer run as its spec
// says (ModelConfig::layers, layer_spec.h).
//
// Prefill runs whole prompts: every layer's projections are matrix-matrix products over all prompt
// tokens of all sequences, attention is causal within each sequence. Decode runs one new token per
// sequence: the same products with one row per sequence, attention over the cached K/V. Both write
// the KV cache and, on a backend whose kernels are batch-invariant (the CPU's), give bitwise the
// same logits for the same token at the same position.
//
// Memory: the forward pass is a sequence of backend operations over the backend's memory (the
// activations, the model's vectors, the KV cache's blocks); the Transformer itself computes
// nothing and copies the logits to the host at the end.
//
// Tensor parallelism: a Transformer given a Communicator of more than one rank runs one rank's
// part of the model (engine/model_shard.h: its config and weights, and the mode that says how
// the row-parallel products and the experts are joined: gathered, or partial sums all-reduced),
// and gathers the logits of every rank's rows of the vocabulary. Every rank of the group runs
// the same Prefill / Decode at the same time, on the same sequences (the same block tables:
// each rank's cache holds its own KV heads of the same blocks).
//
// Thread-safety: one thread at a time (it owns per-step scratch buffers); the weights and config
// it reads are shared and immutable.
#ifndef BATON_ENGINE_TRANSFORMER_H_
#define BATON_ENGINE_TRANSFORMER_H_

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "engine/expert_routing.h"
#include "engine/forward_pass.h"
#include "engine/kv_cache.h"
#include "engine/model_config.h"
#include "engine/model_shard.h"
#include "engine/model_weights.h"
#include "engine/vocab.h"
#include "kernels/backend.h"
#include "kernels/backend_buffer.h"
#include "kernels/communicator.h"

namespace baton::engine {

class Transformer final : public ForwardPass {
 public:
  // All pointers must outlive the Transformer. `communicator`: null, or this rank's in its
  // tensor-parallel group (config and weights then this rank's shard, made in `mode`).
  Transformer(const ModelConfig* config, const ModelWeights* weights, kernels::Backend* backend,
              KvCache* cache, kernels::Communicator* communicator = nullptr,
              TensorParallelMode mode = TensorParallelMode::kExact);
  // Registers the weight matrices with the backend (Backend::RegisterWeights) for the
  // Transformer's lifetime; where the backend keeps its own copy, the file's pages of that matrix
  // are let go (GgufFile::DropResidentPages).
  ~Transformer();
  Transformer(const Transformer&) = delete;
  Transformer& operator=(const Transformer&) = delete;

  // Logits [n_out, n_vocab], n_out = sum over sequences of (all_logits ? tokens : 1), in order.
  // INVALID_ARGUMENT for an empty sequence, a token id out of range, a position past the model's
  // context or a table without room; RESOURCE_EXHAUSTED when the backend cannot allocate the
  // step's memory; nothing is written then. A tensor-parallel rank's failed collective returns
  // its error (the step's KV writes are then undefined; the sequences' token counts stay).
  using ForwardPass::Prefill;
  absl::Status Prefill(std::span<const SequenceInput> sequences, std::vector<float>& logits,
                       const LayerDoneCallback& on_layer_done) override;
  // As Prefill, but every sequence brings exactly one token.
  absl::Status Decode(std::span<const SequenceInput> sequences,
                      std::vector<float>& logits) override;

  const ModelConfig& config() const override { return config_; }

 private:
  absl::Status Validate(std::span<const SequenceInput> sequences) const;
  // The step's structure for Backend::BeginStep: the sequences' row counts, their block tables'
  // lengths and which rows give logits.
  uint64_t StepShape(std::span<const SequenceInput> sequences, int64_t n_out) const;
  // Queues the layers and the output head for the rows Forward prepared (x holds their
  // embeddings): logits [n_out, n_vocab] into `logits` (host-memory backends) or logits_.
  void QueueLayersAndOutput(std::span<const SequenceInput> sequences, int64_t n, int64_t n_out,
                            std::vector<float>& logits, const LayerDoneCallback& on_layer_done);
  // One layer's attention block from xb (its input norm) to xb (its output projection), and its
  // feed-forward block likewise.
  void QueueAttention(int32_t l, std::span<const SequenceInput> sequences, int64_t n);
  // QueueAttention's heads for a layer of ordinary attention: Q, K, V to the output projection
  // (into xb, before its bias).
  void QueueHeadAttention(int32_t l, std::span<const SequenceInput> sequences, int64_t n);
  // QueueAttention for a layer of latent attention (layer_spec.h's LatentAttentionSpec);
  // transformer_latent_attention.cc.
  void QueueLatentAttention(int32_t l, std::span<const SequenceInput> sequences, int64_t n);
  // Stores each sequence's rows of k and v [n, kv_dim] in layer l's cache and queues the
  // attention of its queries (q_, rounded to f16) over its cache into attn_.
  void QueueCachedAttention(int32_t l, std::span<const SequenceInput> sequences, const float* k,
                            const float* v, float kq_scale, const float* sinks);
  void QueueFeedForward(int32_t l, int64_t n);
  // The biases of a gated FFN's gate and up products, in the backend's memory; null: none.
  struct FfnBiases {
    const float* gate = nullptr;  // [n_ff]
    const float* up = nullptr;    // [n_ff]
  };
  // gate_out [n, n_ff] = activation(gate · x, up · x) of x [n, n_embd], the gated FFN's input
  // to its down product; up_out holds the up product.
  void QueueGatedActivation(const kernels::WeightMatrix& gate, const kernels::WeightMatrix& up,
                            const FfnBiases& biases, FeedForwardActivation activation,
                            const float* x, int64_t n, float* gate_out, float* up_out);
  // out [n, n_embd] = w · x (+ bias) for a row-parallel product (attention output, feed-forward
  // down), the whole result on every rank: x [n, share] is this rank's share of the input's
  // columns (its heads' values, its feed-forward rows), the whole input without a group. Exact
  // mode gathers the input and the ranks' output rows; partial sums all-reduce.
  void QueueRowParallel(const kernels::WeightMatrix& w, const float* bias, const float* x,
                        int64_t n, float* out);
  // Layer l's mixture of experts from xb to xb: the router's logits to the host, the routing
  // there (ExpertRouting), each expert's products over the rows of its tokens, the weighted sum.
  void QueueExperts(int32_t l, int64_t n);
  // Where the host reads `count` floats of backend memory `device`: itself on a host-memory
  // backend, else a copy in `host` (which waits for the operations queued before).
  const float* OnHost(const kernels::BackendBuffer& device, int64_t count,
                      std::vector<float>& host);
  absl::Status Forward(std::span<const SequenceInput> sequences, std::vector<float>& logits,
                       const LayerDoneCallback& on_layer_done);
  // Scratch for n tokens (n_out of them with logits), in the backend's memory.
  absl::Status ReserveScratch(int64_t n, int64_t n_out);
  // The model's vectors into the backend's memory (once).
  absl::Status UploadVectors();
  // Calls fn(matrix) for every weight matrix that MatMul multiplies.
  template <typename Fn>
  void ForEachMatrix(const Fn& fn) const;
  // Lets the file's pages of m go from this process's memory (a later read faults them back).
  void DropFilePages(const kernels::WeightMatrix& m) const;
  // x f32 [count] becomes its sum over the tensor-parallel ranks (nothing without a group); the
  // first failure of a step is kept in collective_status_ and skips the later collectives.
  void SumOverRanks(float* x, int64_t count);
  // Communicator::AllGatherColumns, the failure kept as SumOverRanks keeps it.
  void GatherOverRanks(const float* in, int64_t rows, int64_t cols, float* out,
                       int64_t out_cols);

  const ModelConfig& config_;
  const ModelWeights& weights_;
  kernels::Backend& backend_;
  KvCache& cache_;
  kernels::Communicator* const communicator_;  // null: no tensor parallelism
  const bool partial_sums_;  // TensorParallelMode::kPartialSums, with a group
  absl::Status collective_status_;             // the current step's first failed collective
  std::vector<kernels::RopeParams> layer_rope_;  // [n_layer], from the layer specs
  // The matrices the backend keeps its own copy of (RegisterWeights): the operations never read
  // their bytes in the file.
  std::vector<const kernels::WeightMatrix*> backend_copies_;

  // The model's f32 vectors (norm weights, biases, RoPE frequency factors) in the backend's
  // memory, where the operations read them; null where the model has none.
  struct LayerVectors {
    const float* attn_norm = nullptr;
    const float* ffn_norm = nullptr;
    const float* bq = nullptr;
    const float* bk = nullptr;
    const float* bv = nullptr;
    const float* q_norm = nullptr;
    const float* k_norm = nullptr;
    const float* attn_post_norm = nullptr;
    const float* ffn_post_norm = nullptr;
    const float* bo = nullptr;
    const float* attn_sinks = nullptr;
    const float* q_a_norm = nullptr;
    const float* kv_a_norm = nullptr;
    const float* router_bias = nullptr;
    const float* experts_gate_bias = nullptr;  // [count, n_ff]
    const float* experts_up_bias = nullptr;    // [count, n_ff]
    const float* experts_down_bias = nullptr;  // [count, n_embd]
  };
  kernels::BackendBuffer vectors_;
  std::vector<LayerVectors> layer_vectors_;  // [n_layer], set with vectors_
  const float* output_norm_ = nullptr;
  const float* rope_freq_factors_ = nullptr;

  // Per-step host arrays, [n] for the n tokens of the current batch.
  std::vector<int32_t> token_ids_;
  std::vector<int32_t> positions_;
  std::vector<int64_t> out_row_ids_;  // [n_out] the rows whose logits are asked for

  // Per-step activations in the backend's memory, grown to the largest batch so far.
  kernels::BackendBuffer x_;         // f32 [n, n_embd] residual stream
  kernels::BackendBuffer xb_;        // f32 [n, n_embd] normed input / projection output
  kernels::BackendBuffer q_;         // f32 [n, q_dim]
  kernels::BackendBuffer k_;         // f32 [n, kv_dim]
  kernels::BackendBuffer v_;         // f32 [n, kv_dim]
  kernels::BackendBuffer attn_;      // f32 [n, q_dim]
  kernels::BackendBuffer gate_;      // f32 [n, n_ff]
  kernels::BackendBuffer up_;        // f32 [n, n_ff]
  kernels::BackendBuffer out_x_;     // f32 [n_out, n_embd] the rows with logits, normed
  kernels::BackendBuffer logits_;    // f32 [n_out, n_vocab], when the backend's memory is not
                                     // the host's (otherwise the caller's vector is written)
  kernels::BackendBuffer rank_logits_;  // f32 [n_out, output rows]: a tensor-parallel rank's
  // Exact tensor parallelism: a row-parallel product's gathered input [n, its input width] and
  // this rank's rows of its output [n, n_embd / size]; the experts' gathered rows, then the
  // shared expert's [n * used + n, n_embd].
  kernels::BackendBuffer gathered_;
  kernels::BackendBuffer rank_rows_;
  kernels::BackendBuffer expert_rows_;
  std::vector<kernels::AttentionQueries> attention_seqs_;  // one per sequence of the batch

  // Latent attention (LatentAttentionSpec; the largest over the layers).
  LatentAttentionSpec largest_latent_;
  kernels::BackendBuffer latent_q_;     // f32 [n, n_head * (nope + rope)] Q's projection
  kernels::BackendBuffer latent_q_a_;   // f32 [n, q_rank] its low-rank bottleneck
  kernels::BackendBuffer head_in_;      // f32 [n, max(nope, kv_rank)] one head's input
  kernels::BackendBuffer head_out_;     // f32 [n, max(kv_rank, value_dim)] its product
  kernels::BackendBuffer rope_part_;    // f32 [n, n_head, rope] the rotated dims
  kernels::BackendBuffer latent_out_;   // f32 [n, n_head * value_dim] the heads' values

  // Mixtures of experts: their routing needs the router's logits on the host, so a model with
  // experts never records its steps (Backend::BeginStep).
  bool has_experts_ = false;
  ExpertsSpec largest_experts_;      // each field the largest over the layers
  kernels::BackendBuffer router_logits_;  // f32 [n, count]
  kernels::BackendBuffer shared_logits_;  // f32 [n]
  kernels::BackendBuffer expert_in_;      // f32 [n * used, n_embd] the tokens' rows by expert
  kernels::BackendBuffer expert_gate_;    // f32 [n * used, n_ff_expert]
  kernels::BackendBuffer expert_up_;      // f32 [n * used, n_ff_expert]
  kernels::BackendBuffer expert_out_;     // f32 [n * used + n, n_embd] experts', then shared
  std::vector<float> router_host_;
  std::vector<float> shared_host_;
  ExpertRouting routing_;
};

}  // namespace baton::engine

#endif  // BATON_ENGINE_TRANSFORMER_H_
