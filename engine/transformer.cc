#include "engine/transformer.h"

#include <cmath>
#include <cstdint>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "engine/gguf_file.h"
#include "kernels/cpu/dequantize.h"

namespace baton::engine {
namespace {

void AddInPlace(float* x, const float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] += y[i];
}

void AddBias(float* x, const float* bias, int64_t n_rows, int64_t dim) {
  if (bias == nullptr) return;
  for (int64_t r = 0; r < n_rows; ++r) AddInPlace(x + r * dim, bias, dim);
}

// Rounds x[0..n) to the nearest f16 values (ties to even), kept as f32, for finite values up to
// f16's largest: adding and subtracting 1.5 * 2^(e + 13), where 2^e is the value's binade (at
// least f16's smallest normal binade, 2^-14), leaves it rounded by the f32 addition to a multiple
// of 2^(e - 10), f16's spacing there. Loop of plain arithmetic that the compiler vectorizes.
void RoundToHalfPrecision(float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    uint32_t bits;
    std::memcpy(&bits, &x[i], sizeof bits);
    uint32_t biased = (bits >> 23) & 0xffu;
    biased = biased < 113u ? 113u : biased;  // 113 = 127 - 14
    const uint32_t magic_bits = ((biased + 13u) << 23) | 0x400000u;
    float magic;
    std::memcpy(&magic, &magic_bits, sizeof magic);
    x[i] = (x[i] + magic) - magic;
  }
}

}  // namespace

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
  ForEachMatrix([this](const kernels::WeightMatrix& m) {
    // A backend with its own copy reads the file's pages no more (the embedding rows GetRows
    // reads come back one page at a time): the process need not hold the matrix twice.
    if (backend_.RegisterWeights(m) && weights_.file != nullptr) {
      weights_.file->DropResidentPages(m.data, m.n_rows * kernels::RowBytes(m.dtype, m.n_cols));
    }
  });
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

void Transformer::ResizeScratch(int64_t n) {
  const ModelConfig& c = config_;
  token_ids_.resize(n);
  positions_.resize(n);
  x_.resize(n * c.n_embd);
  xb_.resize(n * c.n_embd);
  q_.resize(n * c.q_dim());
  k_.resize(n * c.kv_dim());
  v_.resize(n * c.kv_dim());
  attn_.resize(n * c.q_dim());
  gate_.resize(n * c.n_ff);
  up_.resize(n * c.n_ff);
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
  ResizeScratch(n);
  {
    int64_t row = 0;
    for (const SequenceInput& seq : sequences) {
      for (size_t i = 0; i < seq.tokens.size(); ++i, ++row) {
        token_ids_[row] = seq.tokens[i];
        positions_[row] = seq.kv->n_tokens + static_cast<int32_t>(i);
      }
    }
  }
  const float attn_scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));

  backend_.GetRows(weights_.token_embd, token_ids_.data(), n, x_.data());
  for (int32_t l = 0; l < c.n_layer; ++l) {
    const LayerWeights& w = weights_.layers[l];
    // Attention block.
    backend_.RmsNorm(x_.data(), w.attn_norm, n, c.n_embd, c.rms_eps, xb_.data());
    {
      const kernels::WeightMatrix* qkv[] = {&w.wq, &w.wk, &w.wv};
      float* out[] = {q_.data(), k_.data(), v_.data()};
      backend_.MatMulMany(qkv, xb_.data(), n, out);
    }
    AddBias(q_.data(), w.bq, n, c.q_dim());
    AddBias(k_.data(), w.bk, n, c.kv_dim());
    AddBias(v_.data(), w.bv, n, c.kv_dim());
    backend_.Rope(q_.data(), n, c.n_head, c.head_dim, positions_.data(), rope_);
    backend_.Rope(k_.data(), n, c.n_head_kv, c.head_dim, positions_.data(), rope_);
    // The product with the f16 K cache takes Q in f16 too, as GGML's mul_mat converts it
    // (llama.cpp's attention); K and V are rounded by the cache itself.
    RoundToHalfPrecision(q_.data(), n * c.q_dim());
    attention_seqs_.clear();
    int64_t row = 0;
    for (const SequenceInput& seq : sequences) {
      const int64_t n_seq = static_cast<int64_t>(seq.tokens.size());
      for (int64_t i = 0; i < n_seq; ++i) {
        cache_.Write(l, *seq.kv, positions_[row + i], &k_[(row + i) * c.kv_dim()],
                     &v_[(row + i) * c.kv_dim()]);
      }
      attention_seqs_.push_back(
          {.q = &q_[row * c.q_dim()],
           .q_positions = &positions_[row],
           .n_q = n_seq,
           .kv = cache_.LayerView(l, *seq.kv, seq.kv->n_tokens + static_cast<int32_t>(n_seq)),
           .out = &attn_[row * c.q_dim()]});
      row += n_seq;
    }
    backend_.AttentionMany(attention_seqs_, c.n_head, attn_scale);
    backend_.MatMul(w.wo, attn_.data(), n, xb_.data());
    AddInPlace(x_.data(), xb_.data(), n * c.n_embd);
    // Feed-forward block (SwiGLU).
    backend_.RmsNorm(x_.data(), w.ffn_norm, n, c.n_embd, c.rms_eps, xb_.data());
    {
      const kernels::WeightMatrix* gate_up[] = {&w.w_gate, &w.w_up};
      float* out[] = {gate_.data(), up_.data()};
      backend_.MatMulMany(gate_up, xb_.data(), n, out);
    }
    backend_.SiluMul(gate_.data(), up_.data(), n * c.n_ff, gate_.data());
    backend_.MatMul(w.w_down, gate_.data(), n, xb_.data());
    AddInPlace(x_.data(), xb_.data(), n * c.n_embd);
    if (on_layer_done) on_layer_done(l);
  }
  for (const SequenceInput& seq : sequences) {
    seq.kv->n_tokens += static_cast<int32_t>(seq.tokens.size());
  }

  // Output rows: the last token of each sequence, or all of its tokens.
  out_rows_.resize(n_out * c.n_embd);
  int64_t row = 0;
  int64_t out = 0;
  for (const SequenceInput& seq : sequences) {
    const int64_t n_seq = static_cast<int64_t>(seq.tokens.size());
    const int64_t first = seq.all_logits ? row : row + n_seq - 1;
    const int64_t count = seq.all_logits ? n_seq : 1;
    std::copy(x_.begin() + first * c.n_embd, x_.begin() + (first + count) * c.n_embd,
              out_rows_.begin() + out * c.n_embd);
    out += count;
    row += n_seq;
  }
  backend_.RmsNorm(out_rows_.data(), weights_.output_norm, n_out, c.n_embd, c.rms_eps,
                   out_rows_.data());
  logits.resize(n_out * c.n_vocab);
  backend_.MatMul(weights_.output, out_rows_.data(), n_out, logits.data());
  return absl::OkStatus();
}

}  // namespace baton::engine
