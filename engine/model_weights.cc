#include "engine/model_weights.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/gguf_file.h"
#include "kernels/cpu/dequantize.h"

namespace baton::engine {
namespace {

class WeightLoader {
 public:
  WeightLoader(const GgufFile& file, ModelWeights& weights) : file_(file), weights_(weights) {}

  // A matrix [n_rows, n_cols]: GGUF dims {n_cols, n_rows}.
  absl::StatusOr<kernels::WeightMatrix> Matrix(const std::string& name, int64_t n_rows,
                                               int64_t n_cols) {
    absl::StatusOr<const GgufTensorInfo*> t = Find(name, {n_cols, n_rows});
    if (!t.ok()) return t.status();
    if (absl::Status s = CheckMatrixType(name, (*t)->dtype); !s.ok()) return s;
    return kernels::WeightMatrix{.dtype = (*t)->dtype, .n_rows = n_rows, .n_cols = n_cols,
                                 .data = (*t)->data};
  }

  // A 1-D tensor [n_cols] as a matrix of one row (the shared expert's gate).
  absl::StatusOr<kernels::WeightMatrix> RowMatrix(const std::string& name, int64_t n_cols) {
    absl::StatusOr<const GgufTensorInfo*> t = Find(name, {n_cols});
    if (!t.ok()) return t.status();
    if (absl::Status s = CheckMatrixType(name, (*t)->dtype); !s.ok()) return s;
    return kernels::WeightMatrix{.dtype = (*t)->dtype, .n_rows = 1, .n_cols = n_cols,
                                 .data = (*t)->data};
  }

  // A 3-D tensor of `count` matrices [n_rows, n_cols] (GGUF dims {n_cols, n_rows, count}: a
  // layer's experts, or a matrix per head), one view each; or, where the matrices are stored one
  // by one (a Hugging Face checkpoint's experts), "<name>" with ".weight" as ".<i>.weight".
  absl::StatusOr<std::vector<kernels::WeightMatrix>> Stack(const std::string& name,
                                                           int64_t count, int64_t n_rows,
                                                           int64_t n_cols) {
    if (!Has(name) && Has(PartName(name, 0))) {
      std::vector<kernels::WeightMatrix> matrices(count);
      for (int64_t e = 0; e < count; ++e) {
        absl::StatusOr<kernels::WeightMatrix> m = Matrix(PartName(name, e), n_rows, n_cols);
        if (!m.ok()) return m.status();
        matrices[e] = *m;
      }
      return matrices;
    }
    absl::StatusOr<const GgufTensorInfo*> t = Find(name, {n_cols, n_rows, count});
    if (!t.ok()) return t.status();
    if (absl::Status s = CheckMatrixType(name, (*t)->dtype); !s.ok()) return s;
    const int64_t bytes = n_rows * kernels::RowBytes((*t)->dtype, n_cols);
    std::vector<kernels::WeightMatrix> matrices;
    for (int64_t e = 0; e < count; ++e) {
      matrices.push_back({.dtype = (*t)->dtype, .n_rows = n_rows, .n_cols = n_cols,
                          .data = (*t)->data + e * bytes});
    }
    return matrices;
  }

  // A vector [n] as f32 (converted and owned when stored in another type).
  absl::StatusOr<const float*> Vector(const std::string& name, int64_t n) {
    return Vectors(name, 1, n);
  }

  // `count` vectors [n] (GGUF dims {n, count}; {n} for one) as f32 [count, n].
  absl::StatusOr<const float*> Vectors(const std::string& name, int64_t count, int64_t n) {
    absl::StatusOr<const GgufTensorInfo*> t =
        Find(name, count == 1 ? std::vector<int64_t>{n} : std::vector<int64_t>{n, count});
    if (!t.ok()) return t.status();
    if ((*t)->dtype == kernels::DType::kF32) return reinterpret_cast<const float*>((*t)->data);
    if (!kernels::Traits((*t)->dtype).can_dequantize || n % kernels::Traits((*t)->dtype).block_size) {
      return absl::InvalidArgumentError(absl::StrCat(file_.path(), ": tensor '", name,
                                                     "' has unsupported type ",
                                                     std::string(kernels::DTypeName((*t)->dtype))));
    }
    auto copy = std::make_unique<float[]>(count * n);
    for (int64_t r = 0; r < count; ++r) {
      kernels::DequantizeRow((*t)->dtype,
                             (*t)->data + r * kernels::RowBytes((*t)->dtype, n),
                             copy.get() + r * n, n);
    }
    weights_.owned.push_back(std::move(copy));
    return weights_.owned.back().get();
  }

  bool Has(const std::string& name) const { return file_.FindTensor(name) != nullptr; }

  // "blk.0.ffn_up_exps.weight", 3 -> "blk.0.ffn_up_exps.3.weight".
  static std::string PartName(const std::string& name, int64_t part) {
    const size_t dot = name.rfind('.');
    return absl::StrCat(name.substr(0, dot), ".", part, name.substr(dot));
  }

 private:
  absl::Status CheckMatrixType(const std::string& name, kernels::DType dtype) const {
    if (kernels::Traits(dtype).can_dequantize) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrCat(file_.path(), ": tensor '", name,
                                                   "' has unsupported type ",
                                                   std::string(kernels::DTypeName(dtype))));
  }

  absl::StatusOr<const GgufTensorInfo*> Find(const std::string& name,
                                             const std::vector<int64_t>& dims) {
    const GgufTensorInfo* t = file_.FindTensor(name);
    if (t == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat(file_.path(), ": missing tensor '", name, "'"));
    }
    if (t->dims != dims) {
      return absl::InvalidArgumentError(absl::StrCat(
          file_.path(), ": tensor '", name, "' has dims [", absl::StrJoin(t->dims, ", "),
          "], expected [", absl::StrJoin(dims, ", "), "]"));
    }
    return t;
  }

  const GgufFile& file_;
  ModelWeights& weights_;
};

#define BATON_ASSIGN(lhs, expr)               \
  do {                                        \
    auto result = (expr);                     \
    if (!result.ok()) return result.status(); \
    lhs = *result;                            \
  } while (0)

// Layer `l`'s latent attention (blk.N. is `p`).
absl::Status LoadLatentAttention(WeightLoader& load, const ModelConfig& c,
                                 const LatentAttentionSpec& latent, const std::string& p,
                                 LayerWeights& l) {
  const int64_t q_head = latent.nope_dim + c.rope_n_dims;
  if (latent.q_rank > 0) {
    BATON_ASSIGN(l.wq_a, load.Matrix(p + "attn_q_a.weight", latent.q_rank, c.n_embd));
    BATON_ASSIGN(l.q_a_norm, load.Vector(p + "attn_q_a_norm.weight", latent.q_rank));
    BATON_ASSIGN(l.wq, load.Matrix(p + "attn_q_b.weight", c.n_head * q_head, latent.q_rank));
  } else {
    BATON_ASSIGN(l.wq, load.Matrix(p + "attn_q.weight", c.n_head * q_head, c.n_embd));
  }
  BATON_ASSIGN(l.wkv_a, load.Matrix(p + "attn_kv_a_mqa.weight", latent.kv_rank + c.rope_n_dims,
                                    c.n_embd));
  BATON_ASSIGN(l.kv_a_norm, load.Vector(p + "attn_kv_a_norm.weight", latent.kv_rank));
  BATON_ASSIGN(l.wk_b,
               load.Stack(p + "attn_k_b.weight", c.n_head, latent.kv_rank, latent.nope_dim));
  BATON_ASSIGN(l.wv_b,
               load.Stack(p + "attn_v_b.weight", c.n_head, latent.value_dim, latent.kv_rank));
  BATON_ASSIGN(l.wo, load.Matrix(p + "attn_output.weight", c.n_embd,
                                 int64_t{c.n_head} * latent.value_dim));
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ModelWeights> LoadModelWeights(const GgufFile& file, const ModelConfig& c) {
  ModelWeights w;
  w.file = &file;
  WeightLoader load(file, w);

  BATON_ASSIGN(w.token_embd, load.Matrix("token_embd.weight", c.n_vocab, c.n_embd));
  BATON_ASSIGN(w.output_norm, load.Vector("output_norm.weight", c.n_embd));
  if (load.Has("output.weight")) {
    BATON_ASSIGN(w.output, load.Matrix("output.weight", c.n_vocab, c.n_embd));
  } else {
    w.output = w.token_embd;
    w.tied_output = true;
  }
  if (load.Has("rope_freqs.weight")) {
    BATON_ASSIGN(w.rope_freq_factors, load.Vector("rope_freqs.weight", c.rope_n_dims / 2));
  }
  w.layers.resize(c.n_layer);
  for (int32_t i = 0; i < c.n_layer; ++i) {
    LayerWeights& l = w.layers[i];
    const AttentionSpec& attention = c.layers[i].attention;
    const FeedForwardSpec& feed_forward = c.layers[i].feed_forward;
    const std::string p = absl::StrCat("blk.", i, ".");
    BATON_ASSIGN(l.attn_norm, load.Vector(p + "attn_norm.weight", c.n_embd));
    if (attention.latent.kv_rank > 0) {
      if (absl::Status s = LoadLatentAttention(load, c, attention.latent, p, l); !s.ok()) {
        return s;
      }
    } else {
      BATON_ASSIGN(l.wq, load.Matrix(p + "attn_q.weight", c.q_dim(), c.n_embd));
      BATON_ASSIGN(l.wk, load.Matrix(p + "attn_k.weight", c.kv_dim(), c.n_embd));
      BATON_ASSIGN(l.wv, load.Matrix(p + "attn_v.weight", c.kv_dim(), c.n_embd));
      BATON_ASSIGN(l.wo, load.Matrix(p + "attn_output.weight", c.n_embd, c.q_dim()));
    }
    if (attention.qkv_bias) {
      BATON_ASSIGN(l.bq, load.Vector(p + "attn_q.bias", c.q_dim()));
      BATON_ASSIGN(l.bk, load.Vector(p + "attn_k.bias", c.kv_dim()));
      BATON_ASSIGN(l.bv, load.Vector(p + "attn_v.bias", c.kv_dim()));
    }
    if (attention.qk_norm) {
      BATON_ASSIGN(l.q_norm, load.Vector(p + "attn_q_norm.weight", c.head_dim));
      BATON_ASSIGN(l.k_norm, load.Vector(p + "attn_k_norm.weight", c.head_dim));
    }
    if (attention.output_bias) {
      BATON_ASSIGN(l.bo, load.Vector(p + "attn_output.bias", c.n_embd));
    }
    if (attention.sinks) BATON_ASSIGN(l.attn_sinks, load.Vector(p + "attn_sinks.weight", c.n_head));
    if (attention.post_norm) {
      BATON_ASSIGN(l.attn_post_norm, load.Vector(p + "post_attention_norm.weight", c.n_embd));
    }
    BATON_ASSIGN(l.ffn_norm, load.Vector(p + c.ffn_norm_tensor + ".weight", c.n_embd));
    const ExpertsSpec& experts = feed_forward.experts;
    if (experts.count == 0) {
      BATON_ASSIGN(l.w_gate, load.Matrix(p + "ffn_gate.weight", c.n_ff, c.n_embd));
      BATON_ASSIGN(l.w_up, load.Matrix(p + "ffn_up.weight", c.n_ff, c.n_embd));
      BATON_ASSIGN(l.w_down, load.Matrix(p + "ffn_down.weight", c.n_embd, c.n_ff));
    } else {
      const int64_t n = experts.count, ff = experts.n_ff;
      BATON_ASSIGN(l.router, load.Matrix(p + "ffn_gate_inp.weight", n, c.n_embd));
      std::vector<kernels::WeightMatrix> gate, up, down;
      BATON_ASSIGN(gate, load.Stack(p + "ffn_gate_exps.weight", n, ff, c.n_embd));
      BATON_ASSIGN(up, load.Stack(p + "ffn_up_exps.weight", n, ff, c.n_embd));
      BATON_ASSIGN(down, load.Stack(p + "ffn_down_exps.weight", n, c.n_embd, ff));
      for (int64_t e = 0; e < n; ++e) l.experts.push_back({gate[e], up[e], down[e]});
      if (experts.selection_bias) {
        BATON_ASSIGN(l.selection_bias, load.Vector(p + "exp_probs_b.bias", n));
      }
      if (experts.biases) {
        BATON_ASSIGN(l.router_bias, load.Vector(p + "ffn_gate_inp.bias", n));
        BATON_ASSIGN(l.experts_gate_bias, load.Vectors(p + "ffn_gate_exps.bias", n, ff));
        BATON_ASSIGN(l.experts_up_bias, load.Vectors(p + "ffn_up_exps.bias", n, ff));
        BATON_ASSIGN(l.experts_down_bias, load.Vectors(p + "ffn_down_exps.bias", n, c.n_embd));
      }
    }
    if (experts.n_ff_shared > 0) {
      const int64_t ff = experts.n_ff_shared;
      if (experts.shared_gate) {
        BATON_ASSIGN(l.shared_expert_gate,
                     load.RowMatrix(p + "ffn_gate_inp_shexp.weight", c.n_embd));
      }
      BATON_ASSIGN(l.w_gate, load.Matrix(p + "ffn_gate_shexp.weight", ff, c.n_embd));
      BATON_ASSIGN(l.w_up, load.Matrix(p + "ffn_up_shexp.weight", ff, c.n_embd));
      BATON_ASSIGN(l.w_down, load.Matrix(p + "ffn_down_shexp.weight", c.n_embd, ff));
    }
    if (feed_forward.post_norm) {
      BATON_ASSIGN(l.ffn_post_norm, load.Vector(p + "post_ffw_norm.weight", c.n_embd));
    }
  }
#undef BATON_ASSIGN
  return w;
}

}  // namespace baton::engine
