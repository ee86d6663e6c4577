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
                         kernels::Backend* backend, KvCache* cache)
    : config_(*config), weights_(*weights), backend_(*backend), cache_(*cache) {
  rope_ = kernels::RopeParams{
      .n_dims = config_.rope_n_dims,
      .freq_base = config_.rope_freq_base,
      .freq_scale = config_.rope_freq_scale,
      .neox = config_.rope_neox,
      .freq_factors = weights_.rope_freq_factors,
  };
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
  for (const LayerWeights& l : weights_.layers) {
    for (const kernels::WeightMatrix* m :
         {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down}) {
      fn(*m);
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
    if (end > static_cast<int64_t>(seq.kv->blocks.size()) * cache_.block_size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "forward: sequence ", s, " needs room for ", end, " tokens but holds ",
          seq.kv->blocks.size(), " blocks of ", cache_.block_size()));
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
  }
  vectors.push_back({weights_.output_norm, c.n_embd, &output_norm_});
  vectors.push_back({weights_.rope_freq_factors, c.rope_n_dims / 2, &rope_.freq_factors});
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
  for (auto [buffer, width] : {std::pair{&x_, c.n_embd}, {&xb_, c.n_embd}, {&q_, c.q_dim()},
                               {&k_, c.kv_dim()}, {&v_, c.kv_dim()}, {&attn_, c.q_dim()},
                               {&gate_, c.n_ff}, {&up_, c.n_ff}}) {
    if (absl::Status s = reserve(*buffer, n * width); !s.ok()) return s;
  }
  if (absl::Status s = reserve(out_x_, n_out * c.n_embd); !s.ok()) return s;
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
  // A pass whose layers are watched as they end (the hand-off) is never recorded: its callback
  // runs host work between them.
  const bool step = !on_layer_done;
  if (step) backend_.BeginStep(StepShape(sequences, n_out), n);
  QueueLayersAndOutput(sequences, n, n_out, logits, on_layer_done);
  if (step && !backend_.EndStep()) QueueLayersAndOutput(sequences, n, n_out, logits, {});
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
    QueueAttention(l, sequences, n);  // xb: the attention's output projection
    backend_.AddRmsNorm(x, xb, wv.ffn_norm, n, c.n_embd, c.rms_eps, xb);
    QueueFeedForward(l, n);  // xb: the feed-forward output, added at the next norm
    if (on_layer_done) on_layer_done(l);
  }
  backend_.Add(x, xb, n * c.n_embd);
  float* out_x = out_x_.as<float>();
  backend_.GatherRows(x, out_row_ids_.data(), n_out, c.n_embd, out_x);
  backend_.RmsNorm(out_x, output_norm_, n_out, c.n_embd, c.rms_eps, out_x);
  backend_.MatMul(weights_.output, out_x, n_out,
                  backend_.host_memory() ? logits.data() : logits_.as<float>());
}

void Transformer::QueueAttention(int32_t l, std::span<const SequenceInput> sequences,
                                 int64_t n) {
  const ModelConfig& c = config_;
  const LayerWeights& w = weights_.layers[l];
  const LayerVectors& wv = layer_vectors_[l];
  float* q = q_.as<float>();
  float* k = k_.as<float>();
  float* v = v_.as<float>();
  float* attn = attn_.as<float>();
  {
    const kernels::WeightMatrix* qkv[] = {&w.wq, &w.wk, &w.wv};
    float* out[] = {q, k, v};
    backend_.MatMulMany(qkv, xb_.as<float>(), n, out);
  }
  if (wv.bq != nullptr) backend_.AddRowBias(q, wv.bq, n, c.q_dim());
  if (wv.bk != nullptr) backend_.AddRowBias(k, wv.bk, n, c.kv_dim());
  if (wv.bv != nullptr) backend_.AddRowBias(v, wv.bv, n, c.kv_dim());
  backend_.Rope(q, n, c.n_head, c.head_dim, positions_.data(), rope_);
  backend_.Rope(k, n, c.n_head_kv, c.head_dim, positions_.data(), rope_);
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
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  backend_.AttentionMany(attention_seqs_, c.n_head, scale);
  backend_.MatMul(w.wo, attn, n, xb_.as<float>());
}

void Transformer::QueueFeedForward(int32_t l, int64_t n) {  // SwiGLU
  const LayerWeights& w = weights_.layers[l];
  float* gate = gate_.as<float>();
  float* up = up_.as<float>();
  {
    const kernels::WeightMatrix* gate_up[] = {&w.w_gate, &w.w_up};
    float* out[] = {gate, up};
    backend_.MatMulMany(gate_up, xb_.as<float>(), n, out);
  }
  backend_.SiluMul(gate, up, n * config_.n_ff, gate);
  backend_.MatMul(w.w_down, gate, n, xb_.as<float>());
}

}  // namespace baton::engine
