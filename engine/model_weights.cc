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
    if (!kernels::Traits((*t)->dtype).can_dequantize) {
      return absl::InvalidArgumentError(absl::StrCat(file_.path(), ": tensor '", name,
                                                     "' has unsupported type ",
                                                     std::string(kernels::DTypeName((*t)->dtype))));
    }
    return kernels::WeightMatrix{.dtype = (*t)->dtype, .n_rows = n_rows, .n_cols = n_cols,
                                 .data = (*t)->data};
  }

  // A vector [n] as f32 (converted and owned when stored in another type).
  absl::StatusOr<const float*> Vector(const std::string& name, int64_t n) {
    absl::StatusOr<const GgufTensorInfo*> t = Find(name, {n});
    if (!t.ok()) return t.status();
    if ((*t)->dtype == kernels::DType::kF32) return reinterpret_cast<const float*>((*t)->data);
    if (!kernels::Traits((*t)->dtype).can_dequantize || n % kernels::Traits((*t)->dtype).block_size) {
      return absl::InvalidArgumentError(absl::StrCat(file_.path(), ": tensor '", name,
                                                     "' has unsupported type ",
                                                     std::string(kernels::DTypeName((*t)->dtype))));
    }
    auto copy = std::make_unique<float[]>(n);
    kernels::DequantizeRow((*t)->dtype, (*t)->data, copy.get(), n);
    weights_.owned.push_back(std::move(copy));
    return weights_.owned.back().get();
  }

  bool Has(const std::string& name) const { return file_.FindTensor(name) != nullptr; }

 private:
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

}  // namespace

absl::StatusOr<ModelWeights> LoadModelWeights(const GgufFile& file, const ModelConfig& c) {
  ModelWeights w;
  w.file = &file;
  WeightLoader load(file, w);
#define BATON_ASSIGN(lhs, expr)        \
  do {                                 \
    auto result = (expr);              \
    if (!result.ok()) return result.status(); \
    lhs = *result;                     \
  } while (0)

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
    const std::string p = absl::StrCat("blk.", i, ".");
    BATON_ASSIGN(l.attn_norm, load.Vector(p + "attn_norm.weight", c.n_embd));
    BATON_ASSIGN(l.wq, load.Matrix(p + "attn_q.weight", c.q_dim(), c.n_embd));
    BATON_ASSIGN(l.wk, load.Matrix(p + "attn_k.weight", c.kv_dim(), c.n_embd));
    BATON_ASSIGN(l.wv, load.Matrix(p + "attn_v.weight", c.kv_dim(), c.n_embd));
    if (c.qkv_bias) {
      BATON_ASSIGN(l.bq, load.Vector(p + "attn_q.bias", c.q_dim()));
      BATON_ASSIGN(l.bk, load.Vector(p + "attn_k.bias", c.kv_dim()));
      BATON_ASSIGN(l.bv, load.Vector(p + "attn_v.bias", c.kv_dim()));
    }
    BATON_ASSIGN(l.wo, load.Matrix(p + "attn_output.weight", c.n_embd, c.q_dim()));
    BATON_ASSIGN(l.ffn_norm, load.Vector(p + "ffn_norm.weight", c.n_embd));
    BATON_ASSIGN(l.w_gate, load.Matrix(p + "ffn_gate.weight", c.n_ff, c.n_embd));
    BATON_ASSIGN(l.w_up, load.Matrix(p + "ffn_up.weight", c.n_ff, c.n_embd));
    BATON_ASSIGN(l.w_down, load.Matrix(p + "ffn_down.weight", c.n_embd, c.n_ff));
  }
#undef BATON_ASSIGN
  return w;
}

}  // namespace baton::engine
