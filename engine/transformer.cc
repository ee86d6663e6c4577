#include "engine/transformer.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/gguf_file.h"
#include "kernels/cpu/dequantize.h"

namespace baton::engine {

Transformer::Transformer(const ModelConfig* config, const ModelWeights* weights,
                         kernels::Backend* backend, KvCache* cache,
                         kernels::Communicator* communicator, TensorParallelMode mode)
    : config_(*config),
      weights_(*weights),
      backend_(*backend),
      cache_(*cache),
      communicator_(communicator != nullptr && communicator->size() > 1 ? communicator
                                                                         : nullptr),
      partial_sums_(communicator_ != nullptr && mode == TensorParallelMode::kPartialSums) {
  for (const LayerSpec& layer : config_.layers) {
    const ExpertsSpec& e = layer.feed_forward.experts;
    has_experts_ = has_experts_ || e.count > 0;
    largest_experts_.count = std::max(largest_experts_.count, e.count);
    largest_experts_.used = std::max(largest_experts_.used, e.used);
    largest_experts_.n_ff = std::max(largest_experts_.n_ff, e.n_ff);
    largest_experts_.n_ff_shared = std::max(largest_experts_.n_ff_shared, e.n_ff_shared);
    const LatentAttentionSpec& a = layer.attention.latent;
    largest_latent_.kv_rank = std::max(largest_latent_.kv_rank, a.kv_rank);
    largest_latent_.q_rank = std::max(largest_latent_.q_rank, a.q_rank);
    largest_latent_.nope_dim = std::max(largest_latent_.nope_dim, a.nope_dim);
    largest_latent_.value_dim = std::max(largest_latent_.value_dim, a.value_dim);
    layer_rope_.push_back(kernels::RopeParams{
        .n_dims = config_.rope_n_dims,
        .freq_base = layer.attention.rope_freq_base,
        .freq_scale = layer.attention.rope_freq_scale,
        .neox = config_.rope_neox,
        .ext_factor = config_.rope_yarn.ext_factor,
        .attn_factor = config_.rope_yarn.attn_factor,
        .beta_fast = config_.rope_yarn.beta_fast,
        .beta_slow = config_.rope_yarn.beta_slow,
        .n_ctx_orig = config_.rope_yarn.n_ctx_orig,
        .truncate = config_.rope_yarn.truncate,
    });
  }
  // A backend with its own copy reads the file's pages no more (where its GetRows reads the
  // embedding rows there, they come back a page at a time): the process need not hold the matrix
  // twice. Each goes as soon as its copy is made.
  ForEachMatrix([this](const kernels::WeightMatrix& m) {
    if (!backend_.RegisterWeights(m)) return;
    backend_copies_.push_back(&m);
    DropFilePages(m);
  });
}

void Transformer::DropFilePages(const kernels::WeightMatrix& m) const {
  if (weights_.file == nullptr) return;
  weights_.file->DropResidentPages(m.data, m.n_rows * kernels::RowBytes(m.dtype, m.n_cols));
}

Transformer::~Transformer() {
  ForEachMatrix([this](const kernels::WeightMatrix& m) { backend_.ReleaseWeights(m); });
}

// The output matrix first: registering the largest matrix while little else is resident keeps
// the peak of holding one matrix twice (the file's pages and the backend's copy) low.
template <typename Fn>
void Transformer::ForEachMatrix(const Fn& fn) const {
  fn(weights_.output);
  auto present = [&fn](const kernels::WeightMatrix& m) {
    if (m.data != nullptr) fn(m);
  };
  for (const LayerWeights& l : weights_.layers) {
    for (const kernels::WeightMatrix* m :
         {&l.wq, &l.wk, &l.wv, &l.wo, &l.wq_a, &l.wkv_a, &l.w_gate, &l.w_up, &l.w_down,
          &l.router, &l.shared_expert_gate}) {
      present(*m);
    }
    for (const kernels::WeightMatrix& m : l.wk_b) present(m);
    for (const kernels::WeightMatrix& m : l.wv_b) present(m);
    for (const ExpertWeights& e : l.experts) {
      for (const kernels::WeightMatrix* m : {&e.gate, &e.up, &e.down}) present(*m);
    }
  }
}

absl::Status Transformer::Validate(std::span<const SequenceInput> sequences) const {
  if (sequences.empty()) return absl::InvalidArgumentError("forward: empty batch");
  for (size_t s = 0; s < sequences.size(); ++s) {
    const SequenceInput& seq = sequences[s];
    if (seq.kv == nullptr || seq.tokens.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("forward: sequence ", s, " has no tokens or no KV table"));
    }
    for (size_t i = 0; i < seq.tokens.size(); ++i) {
      if (seq.tokens[i] < 0 || seq.tokens[i] >= config_.n_vocab) {
        return absl::InvalidArgumentError(absl::StrCat("forward: sequence ", s, " token ", i,
                                                       " has id ", seq.tokens[i], ", outside [0, ",
                                                       config_.n_vocab, ")"));
      }
    }
    const int64_t end = int64_t{seq.kv->n_tokens} + static_cast<int64_t>(seq.tokens.size());
    if (end > config_.n_ctx_train) {
      return absl::InvalidArgumentError(absl::StrCat("forward: sequence ", s, " would reach ", end,
                                                     " tokens, past the model's context of ",
                                                     config_.n_ctx_train));
    }
    if (end > int64_t{seq.kv->n_blocks()} * cache_.block_size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "forward: sequence ", s, " needs room for ", end, " tokens but holds ",
          seq.kv->n_blocks(), " blocks of ", cache_.block_size()));
    }
  }
  return absl::OkStatus();
}

absl::Status Transformer::Prefill(std::span<const SequenceInput> sequences,
                                  std::vector<float>& logits,
                                  const LayerDoneCallback& on_layer_done) {
  if (absl::Status s = Validate(sequences); !s.ok()) return s;
  return Forward(sequences, logits, on_layer_done);
}

absl::Status Transformer::Decode(std::span<const SequenceInput> sequences,
                                 std::vector<float>& logits) {
  for (const SequenceInput& seq : sequences) {
    if (seq.tokens.size() != 1) {
      return absl::InvalidArgumentError("decode: every sequence brings exactly one token");
    }
  }
  if (absl::Status s = Validate(sequences); !s.ok()) return s;
  return Forward(sequences, logits, nullptr);
}

absl::Status Transformer::UploadVectors() {
  const ModelConfig& c = config_;
  // (host vector, length, where its copy's address goes): every vector the operations read.
  struct Vector {
    const float* host;
    int64_t n;
    const float** copy;
  };
  std::vector<Vector> vectors;
  layer_vectors_.assign(c.n_layer, {});
  for (int32_t l = 0; l < c.n_layer; ++l) {
    const LayerWeights& w = weights_.layers[l];
    LayerVectors& to = layer_vectors_[l];
    vectors.push_back({w.attn_norm, c.n_embd, &to.attn_norm});
    vectors.push_back({w.ffn_norm, c.n_embd, &to.ffn_norm});
    vectors.push_back({w.bq, c.q_dim(), &to.bq});
    vectors.push_back({w.bk, c.kv_dim(), &to.bk});
    vectors.push_back({w.bv, c.kv_dim(), &to.bv});
    vectors.push_back({w.q_norm, c.head_dim, &to.q_norm});
    vectors.push_back({w.k_norm, c.head_dim, &to.k_norm});
    vectors.push_back({w.attn_post_norm, c.n_embd, &to.attn_post_norm});
    vectors.push_back({w.ffn_post_norm, c.n_embd, &to.ffn_post_norm});
    vectors.push_back({w.bo, c.n_embd, &to.bo});
    vectors.push_back({w.attn_sinks, c.n_head, &to.attn_sinks});
    const LatentAttentionSpec& a = c.layers[l].attention.latent;
    vectors.push_back({w.q_a_norm, a.q_rank, &to.q_a_norm});
    vectors.push_back({w.kv_a_norm, a.kv_rank, &to.kv_a_norm});
    const ExpertsSpec& e = c.layers[l].feed_forward.experts;
    vectors.push_back({w.router_bias, e.count, &to.router_bias});
    vectors.push_back({w.experts_gate_bias, int64_t{e.count} * e.n_ff, &to.experts_gate_bias});
    vectors.push_back({w.experts_up_bias, int64_t{e.count} * e.n_ff, &to.experts_up_bias});
    vectors.push_back({w.experts_down_bias, int64_t{e.count} * c.n_embd, &to.experts_down_bias});
  }
  vectors.push_back({weights_.output_norm, c.n_embd, &output_norm_});
  vectors.push_back({weights_.rope_freq_factors, c.rope_n_dims / 2, &rope_freq_factors_});
  // Each copy starts on a 64-byte boundary.
  auto padded = [](int64_t n) { return (n + 15) / 16 * 16; };
  int64_t total = 0;
  for (const Vector& v : vectors) total += v.host != nullptr ? padded(v.n) : 0;
  absl::StatusOr<kernels::BackendBuffer> buffer = kernels::BackendBuffer::Allocate(
      backend_, static_cast<size_t>(std::max<int64_t>(total, 1)) * sizeof(float));
  if (!buffer.ok()) return buffer.status();
  vectors_ = *std::move(buffer);
  float* next = vectors_.as<float>();
  for (const Vector& v : vectors) {
    if (v.host == nullptr) continue;
    backend_.CopyToDevice(next, v.host, static_cast<size_t>(v.n) * sizeof(float));
    *v.copy = next;
    next += padded(v.n);
  }
  for (kernels::RopeParams& rope : layer_rope_) rope.freq_factors = rope_freq_factors_;
  return absl::OkStatus();
}

absl::Status Transformer::ReserveScratch(int64_t n, int64_t n_out) {
  const ModelConfig& c = config_;
  token_ids_.resize(n);
  positions_.resize(n);
  out_row_ids_.resize(n_out);
  auto reserve = [this](kernels::BackendBuffer& buffer, int64_t floats) -> absl::Status {
    const size_t bytes = static_cast<size_t>(floats) * sizeof(float);
    if (buffer.bytes() >= bytes) return absl::OkStatus();
    buffer = {};  // the old one goes first
    absl::StatusOr<kernels::BackendBuffer> fresh =
        kernels::BackendBuffer::Allocate(backend_, bytes);
    if (!fresh.ok()) return fresh.status();
    buffer = *std::move(fresh);
    return absl::OkStatus();
  };
  const ExpertsSpec& e = largest_experts_;
  const int64_t n_ff = std::max(c.n_ff, e.n_ff_shared);
  for (auto [buffer, width] : {std::pair{&x_, c.n_embd}, {&xb_, c.n_embd}, {&q_, c.q_dim()},
                               {&k_, c.kv_dim()}, {&v_, c.kv_dim()}, {&attn_, c.q_dim()},
                               {&gate_, n_ff}, {&up_, n_ff}}) {
    if (absl::Status s = reserve(*buffer, n * width); !s.ok()) return s;
  }
  if (const LatentAttentionSpec& a = largest_latent_; a.kv_rank > 0) {
    const int64_t rope = c.rope_n_dims;
    for (auto [buffer, floats] :
         {std::pair{&latent_q_, n * c.n_head * (a.nope_dim + rope)},
          {&latent_q_a_, n * a.q_rank}, {&head_in_, n * std::max(a.nope_dim, a.kv_rank)},
          {&head_out_, n * std::max(a.kv_rank, a.value_dim)}, {&rope_part_, n * c.n_head * rope},
          {&latent_out_, n * c.n_head * a.value_dim}}) {
      if (absl::Status s = reserve(*buffer, floats); !s.ok()) return s;
    }
  }
  if (has_experts_) {
    for (auto [buffer, floats] :
         {std::pair{&router_logits_, n * e.count}, {&shared_logits_, n},
          {&expert_in_, n * e.used * c.n_embd}, {&expert_gate_, n * e.used * e.n_ff},
          {&expert_up_, n * e.used * e.n_ff}, {&expert_out_, (n * e.used + n) * c.n_embd}}) {
      if (absl::Status s = reserve(*buffer, floats); !s.ok()) return s;
    }
  }
  if (absl::Status s = reserve(out_x_, n_out * c.n_embd); !s.ok()) return s;
  if (communicator_ != nullptr) {
    if (absl::Status s = reserve(rank_logits_, n_out * weights_.output.n_rows); !s.ok()) return s;
  }
  if (communicator_ != nullptr && !partial_sums_) {  // QueueRowParallel's, QueueExperts'
    int64_t gathered = 0;
    int64_t rank_rows = 0;
    for (const LayerWeights& w : weights_.layers) {
      for (const kernels::WeightMatrix* m : {&w.wo, &w.w_down}) {
        gathered = std::max(gathered, n * m->n_cols);
        rank_rows = std::max(rank_rows, n * m->n_rows);
      }
    }
    if (absl::Status s = reserve(gathered_, gathered); !s.ok()) return s;
    if (absl::Status s = reserve(rank_rows_, rank_rows); !s.ok()) return s;
    if (has_experts_) {
      if (absl::Status s = reserve(expert_rows_, (n * e.used + n) * c.n_embd); !s.ok()) return s;
    }
  }
  if (!backend_.host_memory()) return reserve(logits_, n_out * c.n_vocab);
  return absl::OkStatus();
}

absl::Status Transformer::Forward(std::span<const SequenceInput> sequences,
                                  std::vector<float>& logits,
                                  const LayerDoneCallback& on_layer_done) {
  const ModelConfig& c = config_;
  int64_t n = 0;
  int64_t n_out = 0;
  for (const SequenceInput& seq : sequences) {
    n += static_cast<int64_t>(seq.tokens.size());
    n_out += seq.all_logits ? static_cast<int64_t>(seq.tokens.size()) : 1;
  }
  if (vectors_.bytes() == 0) {
    if (absl::Status s = UploadVectors(); !s.ok()) return s;
    // Reading the vectors, which lie between the matrices in the file, mapped their pages and
    // (the kernel's fault-around, or a large page-cache folio) up to megabytes of the copied
    // matrices' pages around them: 6 MB on the default model.
    for (const kernels::WeightMatrix* m : backend_copies_) DropFilePages(*m);
  }
  if (absl::Status s = ReserveScratch(n, n_out); !s.ok()) return s;
  {
    int64_t row = 0;
    int64_t out = 0;
    for (const SequenceInput& seq : sequences) {
      const auto n_seq = static_cast<int64_t>(seq.tokens.size());
      for (int64_t i = 0; i < n_seq; ++i, ++row) {
        token_ids_[row] = seq.tokens[i];
        positions_[row] = seq.kv->n_tokens + static_cast<int32_t>(i);
        // Output rows: the last token of each sequence, or all of its tokens.
        if (seq.all_logits || i == n_seq - 1) out_row_ids_[out++] = row;
      }
    }
  }
  logits.resize(n_out * c.n_vocab);
  backend_.GetRows(weights_.token_embd, token_ids_.data(), n, x_.as<float>());
  if (c.embedding_scale != 1.0f) backend_.Scale(x_.as<float>(), c.embedding_scale, n * c.n_embd);
  // A pass whose layers are watched as they end (the hand-off) is never recorded: its callback
  // runs host work between them; nor one that routes experts on the host.
  // Nor one of a tensor-parallel rank: its collectives are not the backend's operations.
  const bool step = !on_layer_done && !has_experts_ && communicator_ == nullptr;
  collective_status_ = absl::OkStatus();
  if (step) backend_.BeginStep(StepShape(sequences, n_out), n);
  QueueLayersAndOutput(sequences, n, n_out, logits, on_layer_done);
  if (step && !backend_.EndStep()) QueueLayersAndOutput(sequences, n, n_out, logits, {});
  if (!collective_status_.ok()) return collective_status_;
  for (const SequenceInput& seq : sequences) {
    seq.kv->n_tokens += static_cast<int32_t>(seq.tokens.size());
  }
  if (!backend_.host_memory()) {
    backend_.CopyToHost(logits.data(), logits_.as<float>(), logits.size() * sizeof(float));
  }
  return absl::OkStatus();
}

uint64_t Transformer::StepShape(std::span<const SequenceInput> sequences, int64_t n_out) const {
  uint64_t shape = 0xcbf29ce484222325ull;
  auto mix = [&](int64_t v) { shape = (shape ^ static_cast<uint64_t>(v)) * 0x100000001b3ull; };
  mix(n_out);
  for (const SequenceInput& seq : sequences) {
    const int64_t n_seq = static_cast<int64_t>(seq.tokens.size());
    const int64_t n_tokens = seq.kv->n_tokens + n_seq;
    mix(n_seq);
    mix((n_tokens + cache_.block_size() - 1) / cache_.block_size());  // block table's length
    mix(seq.all_logits ? 1 : 0);
  }
  return shape;
}

void Transformer::QueueLayersAndOutput(std::span<const SequenceInput> sequences, int64_t n,
                                       int64_t n_out, std::vector<float>& logits,
                                       const LayerDoneCallback& on_layer_done) {
  const ModelConfig& c = config_;
  float* x = x_.as<float>();
  float* xb = xb_.as<float>();
  for (int32_t l = 0; l < c.n_layer; ++l) {
    const LayerVectors& wv = layer_vectors_[l];
    // The previous layer's feed-forward output (in xb) joins the residual stream here, with the
    // norm that reads it.
    if (l == 0) {
      backend_.RmsNorm(x, wv.attn_norm, n, c.n_embd, c.rms_eps, xb);
    } else {
      backend_.AddRmsNorm(x, xb, wv.attn_norm, n, c.n_embd, c.rms_eps, xb);
    }
    QueueAttention(l, sequences, n);  // xb: the attention block's output
    backend_.AddRmsNorm(x, xb, wv.ffn_norm, n, c.n_embd, c.rms_eps, xb);
    QueueFeedForward(l, n);  // xb: the feed-forward block's output, added at the next norm
    if (on_layer_done) on_layer_done(l);
  }
  backend_.Add(x, xb, n * c.n_embd);
  float* out_x = out_x_.as<float>();
  backend_.GatherRows(x, out_row_ids_.data(), n_out, c.n_embd, out_x);
  backend_.RmsNorm(out_x, output_norm_, n_out, c.n_embd, c.rms_eps, out_x);
  float* all_logits = backend_.host_memory() ? logits.data() : logits_.as<float>();
  if (communicator_ == nullptr) {
    backend_.MatMul(weights_.output, out_x, n_out, all_logits);
    return;
  }
  // This rank's rows of the vocabulary, then every rank's side by side.
  backend_.MatMul(weights_.output, out_x, n_out, rank_logits_.as<float>());
  GatherOverRanks(rank_logits_.as<float>(), n_out, weights_.output.n_rows, all_logits,
                  c.n_vocab);
}

void Transformer::SumOverRanks(float* x, int64_t count) {
  if (communicator_ == nullptr || !collective_status_.ok()) return;
  collective_status_ = communicator_->AllReduceSum(x, count);
}

void Transformer::GatherOverRanks(const float* in, int64_t rows, int64_t cols, float* out,
                                  int64_t out_cols) {
  if (!collective_status_.ok()) return;
  collective_status_ = communicator_->AllGatherColumns(in, rows, cols, out, out_cols);
}

void Transformer::QueueAttention(int32_t l, std::span<const SequenceInput> sequences,
                                 int64_t n) {
  const ModelConfig& c = config_;
  const AttentionSpec& spec = c.layers[l].attention;
  if (spec.latent.kv_rank > 0) {
    QueueLatentAttention(l, sequences, n);
  } else {
    QueueHeadAttention(l, sequences, n);
  }
  if (spec.post_norm) {
    float* xb = xb_.as<float>();
    backend_.RmsNorm(xb, layer_vectors_[l].attn_post_norm, n, c.n_embd, c.rms_eps, xb);
  }
}

void Transformer::QueueHeadAttention(int32_t l, std::span<const SequenceInput> sequences,
                                     int64_t n) {
  const ModelConfig& c = config_;
  const AttentionSpec& spec = c.layers[l].attention;
  const LayerWeights& w = weights_.layers[l];
  const LayerVectors& wv = layer_vectors_[l];
  float* q = q_.as<float>();
  float* k = k_.as<float>();
  float* v = v_.as<float>();
  {
    const kernels::WeightMatrix* qkv[] = {&w.wq, &w.wk, &w.wv};
    float* out[] = {q, k, v};
    backend_.MatMulMany(qkv, xb_.as<float>(), n, out);
  }
  if (wv.bq != nullptr) backend_.AddRowBias(q, wv.bq, n, c.q_dim());
  if (wv.bk != nullptr) backend_.AddRowBias(k, wv.bk, n, c.kv_dim());
  if (wv.bv != nullptr) backend_.AddRowBias(v, wv.bv, n, c.kv_dim());
  if (spec.qk_norm) {  // every head its own row
    backend_.RmsNorm(q, wv.q_norm, n * c.n_head, c.head_dim, c.rms_eps, q);
    backend_.RmsNorm(k, wv.k_norm, n * c.n_head_kv, c.head_dim, c.rms_eps, k);
  }
  backend_.Rope(q, n, c.n_head, c.head_dim, positions_.data(), layer_rope_[l]);
  backend_.Rope(k, n, c.n_head_kv, c.head_dim, positions_.data(), layer_rope_[l]);
  if (spec.query_scale != 1.0f) backend_.Scale(q, spec.query_scale, n * c.q_dim());
  QueueCachedAttention(l, sequences, k, v, spec.kq_scale, wv.attn_sinks);
  QueueRowParallel(w.wo, wv.bo, attn_.as<float>(), n, xb_.as<float>());
}

void Transformer::QueueCachedAttention(int32_t l, std::span<const SequenceInput> sequences,
                                       const float* k, const float* v, float kq_scale,
                                       const float* sinks) {
  const ModelConfig& c = config_;
  float* q = q_.as<float>();
  float* attn = attn_.as<float>();
  int64_t n = 0;
  for (const SequenceInput& seq : sequences) n += static_cast<int64_t>(seq.tokens.size());
  // The product with the f16 K cache takes Q in f16 too, as GGML's mul_mat converts it
  // (llama.cpp's attention); K and V are rounded by the cache itself.
  backend_.RoundToF16(q, n * c.q_dim());
  attention_seqs_.clear();
  int64_t row = 0;
  for (const SequenceInput& seq : sequences) {
    const int64_t n_seq = static_cast<int64_t>(seq.tokens.size());
    const kernels::KvLayerView kv =
        cache_.LayerView(l, *seq.kv, seq.kv->n_tokens + static_cast<int32_t>(n_seq));
    backend_.WriteKv(kv, &positions_[row], n_seq, k + row * c.kv_dim(), v + row * c.kv_dim());
    attention_seqs_.push_back({.q = q + row * c.q_dim(),
                               .q_positions = &positions_[row],
                               .n_q = n_seq,
                               .kv = kv,
                               .out = attn + row * c.q_dim()});
    row += n_seq;
  }
  backend_.AttentionMany(attention_seqs_, c.n_head, kq_scale, sinks);
}

void Transformer::QueueFeedForward(int32_t l, int64_t n) {
  const ModelConfig& c = config_;
  const FeedForwardSpec& spec = c.layers[l].feed_forward;
  const LayerWeights& w = weights_.layers[l];
  float* xb = xb_.as<float>();
  if (spec.experts.count > 0) {
    QueueExperts(l, n);
  } else {
    QueueGatedActivation(w.w_gate, w.w_up, {}, spec.activation, xb, n, gate_.as<float>(),
                         up_.as<float>());
    QueueRowParallel(w.w_down, nullptr, gate_.as<float>(), n, xb);
  }
  if (spec.post_norm) {
    backend_.RmsNorm(xb, layer_vectors_[l].ffn_post_norm, n, c.n_embd, c.rms_eps, xb);
  }
}

void Transformer::QueueGatedActivation(const kernels::WeightMatrix& gate,
                                       const kernels::WeightMatrix& up, const FfnBiases& biases,
                                       FeedForwardActivation activation, const float* x,
                                       int64_t n, float* gate_out, float* up_out) {
  {
    const kernels::WeightMatrix* gate_up[] = {&gate, &up};
    float* outs[] = {gate_out, up_out};
    backend_.MatMulMany(gate_up, x, n, outs);
  }
  if (biases.gate != nullptr) backend_.AddRowBias(gate_out, biases.gate, n, gate.n_rows);
  if (biases.up != nullptr) backend_.AddRowBias(up_out, biases.up, n, up.n_rows);
  switch (activation) {
    case FeedForwardActivation::kSiluGated:
      backend_.SiluMul(gate_out, up_out, n * gate.n_rows, gate_out);
      break;
    case FeedForwardActivation::kGeluGated:
      backend_.GeluMul(gate_out, up_out, n * gate.n_rows, gate_out);
      break;
    case FeedForwardActivation::kSwigluOai:
      backend_.SwigluOaiMul(gate_out, up_out, n * gate.n_rows, gate_out);
      break;
  }
}

void Transformer::QueueRowParallel(const kernels::WeightMatrix& w, const float* bias,
                                   const float* x, int64_t n, float* out) {
  if (communicator_ == nullptr || partial_sums_) {
    backend_.MatMul(w, x, n, out);
    if (bias != nullptr) backend_.AddRowBias(out, bias, n, w.n_rows);
    SumOverRanks(out, n * w.n_rows);
    return;
  }
  // The whole input, this rank's rows of the output, then every rank's.
  float* input = gathered_.as<float>();
  float* rows = rank_rows_.as<float>();
  GatherOverRanks(x, n, w.n_cols / communicator_->size(), input, w.n_cols);
  backend_.MatMul(w, input, n, rows);
  if (bias != nullptr) backend_.AddRowBias(rows, bias, n, w.n_rows);
  GatherOverRanks(rows, n, w.n_rows, out, config_.n_embd);
}

const float* Transformer::OnHost(const kernels::BackendBuffer& device, int64_t count,
                                 std::vector<float>& host) {
  if (backend_.host_memory()) return device.as<float>();
  host.resize(count);
  backend_.CopyToHost(host.data(), device.as<float>(), count * sizeof(float));
  return host.data();
}

void Transformer::QueueExperts(int32_t l, int64_t n) {
  const ModelConfig& c = config_;
  const FeedForwardSpec& spec = c.layers[l].feed_forward;
  const ExpertsSpec& experts = spec.experts;
  const LayerWeights& w = weights_.layers[l];
  const LayerVectors& wv = layer_vectors_[l];
  float* xb = xb_.as<float>();
  backend_.MatMul(w.router, xb, n, router_logits_.as<float>());
  if (wv.router_bias != nullptr) {
    backend_.AddRowBias(router_logits_.as<float>(), wv.router_bias, n, experts.count);
  }
  const bool shared = experts.n_ff_shared > 0;
  const bool gated = shared && experts.shared_gate;
  if (gated) backend_.MatMul(w.shared_expert_gate, xb, n, shared_logits_.as<float>());
  routing_.Route(OnHost(router_logits_, n * experts.count, router_host_),
                 gated ? OnHost(shared_logits_, n, shared_host_) : nullptr, w.selection_bias, n,
                 experts);

  // Exact tensor parallelism runs this rank's experts (model_shard.h), partial sums every
  // expert's share.
  const bool by_expert = communicator_ != nullptr && !partial_sums_;
  const ShardRange own = by_expert ? ShareOf(experts.count, communicator_->rank(),
                                             communicator_->size())
                                   : ShardRange{.begin = 0, .end = experts.count};
  // Every token's row once per expert it chose, grouped by expert: each expert's matrices are
  // read once for all of its tokens. This rank's experts' rows are [own_first, own_end).
  const int64_t rows = n * experts.used;
  const int64_t own_first = routing_.first_row[own.begin];
  const int64_t own_end = routing_.first_row[own.end];
  float* in = expert_in_.as<float>();
  float* gate = expert_gate_.as<float>();
  float* up = expert_up_.as<float>();
  float* out = expert_out_.as<float>();
  backend_.GatherRows(xb, routing_.token_of_row.data() + own_first, own_end - own_first,
                      c.n_embd, in + own_first * c.n_embd);
  for (int64_t e = own.begin; e < own.end; ++e) {
    const int64_t first = routing_.first_row[e];
    const int64_t m = routing_.first_row[e + 1] - first;
    if (m == 0) continue;
    const ExpertWeights& ew = w.experts[e];
    FfnBiases biases;
    if (experts.biases) {
      biases = {.gate = wv.experts_gate_bias + e * experts.n_ff,
                .up = wv.experts_up_bias + e * experts.n_ff};
    }
    QueueGatedActivation(ew.gate, ew.up, biases, spec.activation, in + first * c.n_embd, m,
                         gate + first * experts.n_ff, up + first * experts.n_ff);
    float* expert_out = out + first * c.n_embd;
    backend_.MatMul(ew.down, gate + first * experts.n_ff, m, expert_out);
    if (wv.experts_down_bias != nullptr) {  // partial sums: rank 0's alone
      backend_.AddRowBias(expert_out, wv.experts_down_bias + e * c.n_embd, m, c.n_embd);
    }
  }
  if (by_expert) {  // every rank's experts' rows, which are in expert order: all of them
    GatherOverRanks(out + own_first * c.n_embd, 1, (own_end - own_first) * c.n_embd,
                    expert_rows_.as<float>(), rows * c.n_embd);
    out = expert_rows_.as<float>();
  }
  if (shared) {  // after the routed rows
    QueueGatedActivation(w.w_gate, w.w_up, {}, spec.activation, xb, n, gate_.as<float>(),
                         up_.as<float>());
    float* shared_out = out + rows * c.n_embd;
    if (partial_sums_) {
      backend_.MatMul(w.w_down, gate_.as<float>(), n, shared_out);  // summed below
    } else {
      QueueRowParallel(w.w_down, nullptr, gate_.as<float>(), n, shared_out);
    }
  }
  backend_.WeightedSumOfRows(out, routing_.slot_row.data(), routing_.slot_weight.data(), n,
                             routing_.slots, c.n_embd, xb);
  if (partial_sums_) SumOverRanks(xb, n * c.n_embd);
}

}  // namespace baton::engine
