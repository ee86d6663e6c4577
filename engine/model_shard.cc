#include "engine/model_shard.h"

#include <cstring>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "kernels/cpu/dequantize.h"

namespace baton::engine {
namespace {

using kernels::WeightMatrix;

// Makes one rank's config and weights; the copies go into the shard.
class Sharder {
 public:
  Sharder(const ModelConfig& config, ModelShard& shard)
      : config_(config), shard_(shard), rank_(shard.rank), size_(shard.size) {}

  absl::Status Check() const {
    const ModelConfig& c = config_;
    if (absl::Status s = Divides(c.n_head, "attention heads"); !s.ok()) return s;
    if (c.n_head_kv % size_ != 0 && size_ % c.n_head_kv != 0) {
      return absl::FailedPreconditionError(absl::StrCat(
          "tensor parallelism over ", size_, " ranks: the model's ", c.n_head_kv,
          " KV heads neither divide among the ranks nor replicate evenly over them"));
    }
    if (exact()) {
      if (absl::Status s = Divides(c.n_embd, "embedding width"); !s.ok()) return s;
    }
    for (const LayerSpec& layer : c.layers) {
      const ExpertsSpec& e = layer.feed_forward.experts;
      if (e.count > 0) {
        absl::Status s = exact() ? Divides(e.count, "experts")
                                 : Divides(e.n_ff, "experts' feed-forward width");
        if (s.ok()) s = Divides(e.n_ff_shared, "shared expert's width");
        if (!s.ok()) return s;
      } else if (absl::Status s = Divides(c.n_ff, "feed-forward width"); !s.ok()) {
        return s;
      }
    }
    return absl::OkStatus();
  }

  ModelConfig Config() const {
    ModelConfig c = config_;
    c.n_head /= size_;
    c.n_head_kv = config_.n_head_kv % size_ == 0 ? config_.n_head_kv / size_ : 1;
    c.n_ff /= size_;
    for (LayerSpec& layer : c.layers) {
      if (!exact()) layer.feed_forward.experts.n_ff /= size_;  // else whole experts
      layer.feed_forward.experts.n_ff_shared /= size_;
    }
    return c;
  }

  absl::Status Layer(int32_t l, const LayerWeights& from, LayerWeights& to) {
    const ModelConfig& c = config_;
    const ModelConfig& local = shard_.config;
    const LayerSpec& spec = c.layers[l];
    const int64_t first_head = int64_t{rank_} * local.n_head;
    const int64_t first_kv_head = FirstKvHead(c, rank_, size_);
    to = from;
    const int64_t hd = c.head_dim;
    if (spec.attention.latent.kv_rank > 0) {
      const LatentAttentionSpec& a = spec.attention.latent;
      const int64_t q_head = a.nope_dim + c.rope_n_dims;
      to.wq = Rows(from.wq, first_head * q_head, local.n_head * q_head);
      to.wk_b.assign(from.wk_b.begin() + first_head,
                     from.wk_b.begin() + first_head + local.n_head);
      to.wv_b.assign(from.wv_b.begin() + first_head,
                     from.wv_b.begin() + first_head + local.n_head);
    } else {
      to.wq = Rows(from.wq, first_head * hd, local.q_dim());
      to.wk = Rows(from.wk, first_kv_head * hd, local.kv_dim());
      to.wv = Rows(from.wv, first_kv_head * hd, local.kv_dim());
      to.bq = Offset(from.bq, first_head * hd);
      to.bk = Offset(from.bk, first_kv_head * hd);
      to.bv = Offset(from.bv, first_kv_head * hd);
    }
    to.attn_sinks = Offset(from.attn_sinks, first_head);
    // The output projection's input: the heads' values, in head order.
    const int64_t head_values =
        spec.attention.latent.kv_rank > 0 ? spec.attention.latent.value_dim : hd;
    if (absl::Status s = RowParallel(l, "attn_output", from.wo, from.bo,
                                     first_head * head_values, local.n_head * head_values,
                                     to.wo, to.bo);
        !s.ok()) {
      return s;
    }
    return FeedForward(l, from, to);
  }

  absl::Status FeedForward(int32_t l, const LayerWeights& from, LayerWeights& to) {
    const ExpertsSpec& e = config_.layers[l].feed_forward.experts;
    const int64_t n_ff = e.count > 0 ? e.n_ff_shared : config_.n_ff;  // the dense block's
    if (absl::Status s = GatedFfn(l, n_ff, from.w_gate, from.w_up, from.w_down, to.w_gate,
                                  to.w_up, to.w_down);
        !s.ok()) {
      return s;
    }
    if (exact()) {  // by expert: this rank's whole, the others' absent
      const ShardRange own = ShareOf(e.count, rank_, size_);
      for (int64_t x = 0; x < e.count; ++x) {
        if (x < own.begin || x >= own.end) to.experts[x] = {};
      }
      return absl::OkStatus();
    }
    for (size_t x = 0; x < from.experts.size(); ++x) {
      const ExpertWeights& fe = from.experts[x];
      ExpertWeights& te = to.experts[x];
      if (absl::Status s =
              GatedFfn(l, e.n_ff, fe.gate, fe.up, fe.down, te.gate, te.up, te.down);
          !s.ok()) {
        return s;
      }
    }
    if (e.biases) {
      to.experts_gate_bias = ExpertRows(from.experts_gate_bias, e.count, e.n_ff);
      to.experts_up_bias = ExpertRows(from.experts_up_bias, e.count, e.n_ff);
      if (rank_ != 0) to.experts_down_bias = nullptr;  // added once, by rank 0
    }
    return absl::OkStatus();
  }

  WeightMatrix Rows(const WeightMatrix& m, int64_t first, int64_t count) const {
    if (m.data == nullptr) return m;
    WeightMatrix out = m;
    out.n_rows = count;
    out.data = static_cast<const uint8_t*>(m.data) + first * kernels::RowBytes(m.dtype, m.n_cols);
    return out;
  }

 private:
  absl::Status Divides(int64_t count, absl::string_view what) const {
    if (count % size_ == 0) return absl::OkStatus();
    return absl::FailedPreconditionError(absl::StrCat("tensor parallelism over ", size_,
                                                      " ranks: the model's ", count, " ", what,
                                                      " do not divide among them"));
  }

  const float* Offset(const float* v, int64_t first) const {
    return v == nullptr ? nullptr : v + first;
  }

  bool exact() const { return shard_.mode == TensorParallelMode::kExact; }

  // The rank's share of a gated FFN of width n_ff: gate and up rows, down row-parallel.
  absl::Status GatedFfn(int32_t l, int64_t n_ff, const WeightMatrix& gate, const WeightMatrix& up,
                        const WeightMatrix& down, WeightMatrix& to_gate, WeightMatrix& to_up,
                        WeightMatrix& to_down) {
    const int64_t local = n_ff / size_;
    to_gate = Rows(gate, rank_ * local, local);
    to_up = Rows(up, rank_ * local, local);
    const float* no_bias = nullptr;
    return RowParallel(l, "ffn_down", down, nullptr, rank_ * local, local, to_down, no_bias);
  }

  // The rank's share of a row-parallel product m (+ bias) whose input this rank holds columns
  // [first, first + count) of: exact, its rows of the output (and of the bias); partial sums, its
  // columns, the bias on rank 0 alone.
  absl::Status RowParallel(int32_t l, absl::string_view name, const WeightMatrix& m,
                           const float* bias, int64_t first, int64_t count, WeightMatrix& out,
                           const float*& out_bias) {
    if (exact()) {
      const int64_t rows = m.n_rows / size_;
      out = Rows(m, rank_ * rows, rows);
      out_bias = Offset(bias, rank_ * rows);
      return absl::OkStatus();
    }
    out_bias = rank_ == 0 ? bias : nullptr;
    return Columns(m, first, count, l, name, out);
  }

  // Columns [first, first + count) of m, copied row by row (each row's blocks are contiguous).
  absl::Status Columns(const WeightMatrix& m, int64_t first, int64_t count, int32_t l,
                       absl::string_view name, WeightMatrix& out) {
    out = m;
    if (m.data == nullptr || (first == 0 && count == m.n_cols)) return absl::OkStatus();
    const kernels::DTypeTraits& t = kernels::Traits(m.dtype);
    if (first % t.block_size != 0 || count % t.block_size != 0) {
      return absl::FailedPreconditionError(absl::StrCat(
          "tensor parallelism over ", size_, " ranks: layer ", l, "'s ", name, " would split at ",
          count, "-column shares, not a multiple of ", std::string(t.name), "'s ", t.block_size,
          "-value blocks"));
    }
    const int64_t row_bytes = kernels::RowBytes(m.dtype, m.n_cols);
    const int64_t offset = first / t.block_size * t.block_bytes;
    const int64_t bytes = count / t.block_size * t.block_bytes;
    auto copy = std::make_unique<uint8_t[]>(static_cast<size_t>(m.n_rows * bytes));
    const auto* src = static_cast<const uint8_t*>(m.data);
    for (int64_t r = 0; r < m.n_rows; ++r) {
      std::memcpy(copy.get() + r * bytes, src + r * row_bytes + offset, bytes);
    }
    out.n_cols = count;
    out.data = copy.get();
    shard_.owned_bytes.push_back(std::move(copy));
    return absl::OkStatus();
  }

  // The rank's n_ff / size values of each of `count` rows of n_ff (the experts' biases).
  const float* ExpertRows(const float* v, int64_t count, int64_t n_ff) {
    if (v == nullptr) return nullptr;
    const int64_t local = n_ff / size_;
    auto copy = std::make_unique<float[]>(static_cast<size_t>(count * local));
    for (int64_t x = 0; x < count; ++x) {
      std::memcpy(copy.get() + x * local, v + x * n_ff + rank_ * local, local * sizeof(float));
    }
    shard_.owned_floats.push_back(std::move(copy));
    return shard_.owned_floats.back().get();
  }

  const ModelConfig& config_;
  ModelShard& shard_;
  const int32_t rank_;
  const int32_t size_;
};

}  // namespace

int32_t FirstKvHead(const ModelConfig& config, int32_t rank, int32_t size) {
  if (config.n_head_kv % size == 0) return rank * (config.n_head_kv / size);
  return rank / (size / config.n_head_kv);  // each head on size / n_head_kv ranks
}

ShardRange ShareOf(int64_t total, int32_t rank, int32_t size) {
  return {.begin = total * rank / size, .end = total * (rank + 1) / size};
}

absl::StatusOr<std::unique_ptr<ModelShard>> ShardModel(const ModelConfig& config,
                                                       const ModelWeights& weights,
                                                       int32_t rank, int32_t size,
                                                       TensorParallelMode mode) {
  if (size < 1 || rank < 0 || rank >= size) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor parallelism: rank ", rank, " of ", size, " ranks"));
  }
  auto shard = std::make_unique<ModelShard>();
  shard->rank = rank;
  shard->size = size;
  shard->mode = mode;
  Sharder sharder(config, *shard);
  if (absl::Status s = sharder.Check(); !s.ok()) return s;
  shard->config = sharder.Config();
  ModelWeights& w = shard->weights;
  w.token_embd = weights.token_embd;
  w.output_norm = weights.output_norm;
  w.tied_output = weights.tied_output;
  w.rope_freq_factors = weights.rope_freq_factors;
  w.file = weights.file;
  const ShardRange vocab = ShareOf(weights.output.n_rows, rank, size);
  w.output = sharder.Rows(weights.output, vocab.begin, vocab.end - vocab.begin);
  w.layers.resize(weights.layers.size());
  for (size_t l = 0; l < weights.layers.size(); ++l) {
    if (absl::Status s = sharder.Layer(static_cast<int32_t>(l), weights.layers[l], w.layers[l]);
        !s.ok()) {
      return s;
    }
  }
  return shard;
}

}  // namespace baton::engine
