// Transformer::QueueLatentAttention: multi-head latent attention as llama.cpp's deepseek2 graph
// runs it with the absorption (layer_spec.h's LatentAttentionSpec). The cache holds, per token,
// one row of kv_rank + rope values (the normed latent, then its rotated RoPE part) as both K and
// V; each head attends with a query in the same space, and lifts its kv_rank outputs to its
// value dims.
#include "engine/transformer.h"

namespace baton::engine {

void Transformer::QueueLatentAttention(int32_t l, std::span<const SequenceInput> sequences,
                                       int64_t n) {
  const ModelConfig& c = config_;
  const AttentionSpec& spec = c.layers[l].attention;
  const LatentAttentionSpec& a = spec.latent;
  const LayerWeights& w = weights_.layers[l];
  const LayerVectors& wv = layer_vectors_[l];
  const int64_t heads = c.n_head;
  const int64_t rope = c.rope_n_dims;
  const int64_t rank = a.kv_rank;
  const int64_t q_head = a.nope_dim + rope;  // a head of Q's projection: [nope | rope]
  const int64_t d = c.head_dim;              // a head of the cache and the query: [rank | rope]
  float* xb = xb_.as<float>();
  float* q_proj = latent_q_.as<float>();  // [n, heads, q_head]
  float* latent = k_.as<float>();         // [n, d]
  float* in = head_in_.as<float>();
  float* out = head_out_.as<float>();
  float* pe = rope_part_.as<float>();

  // Q's projection (through its low-rank bottleneck where it has one), and the latent.
  if (a.q_rank > 0) {
    float* q_a = latent_q_a_.as<float>();
    const kernels::WeightMatrix* ws[] = {&w.wq_a, &w.wkv_a};
    float* ys[] = {q_a, latent};
    backend_.MatMulMany(ws, xb, n, ys);
    backend_.RmsNorm(q_a, wv.q_a_norm, n, a.q_rank, c.rms_eps, q_a);
    backend_.MatMul(w.wq, q_a, n, q_proj);
  } else {
    const kernels::WeightMatrix* ws[] = {&w.wq, &w.wkv_a};
    float* ys[] = {q_proj, latent};
    backend_.MatMulMany(ws, xb, n, ys);
  }

  // The latent's first `rank` values normed, its last `rope` rotated (each on a dense copy).
  backend_.CopyColumns(latent, d, n, rank, in, rank);
  backend_.RmsNorm(in, wv.kv_a_norm, n, rank, c.rms_eps, in);
  backend_.CopyColumns(in, rank, n, rank, latent, d);
  backend_.CopyColumns(latent + rank, d, n, rope, pe, rope);
  backend_.Rope(pe, n, 1, rope, positions_.data(), layer_rope_[l]);
  backend_.CopyColumns(pe, rope, n, rope, latent + rank, d);

  // Each head's query [rank | rope]: its nope part taken into the latent's space by attn_k_b,
  // its RoPE part rotated.
  float* q = q_.as<float>();  // [n, heads, d]
  backend_.CopyColumns(q_proj + a.nope_dim, q_head, n * heads, rope, pe, rope);
  backend_.Rope(pe, n, heads, rope, positions_.data(), layer_rope_[l]);
  backend_.CopyColumns(pe, rope, n * heads, rope, q + rank, d);
  for (int64_t h = 0; h < heads; ++h) {
    backend_.CopyColumns(q_proj + h * q_head, heads * q_head, n, a.nope_dim, in, a.nope_dim);
    backend_.MatMul(w.wk_b[h], in, n, out);
    backend_.CopyColumns(out, rank, n, rank, q + h * d, heads * d);
  }

  // The latent is both K and V: each head's output [d], of which the first `rank` count.
  QueueCachedAttention(l, sequences, latent, latent, spec.kq_scale, nullptr);

  // Each head's values lifted by attn_v_b, then the output projection.
  const float* attn = attn_.as<float>();
  float* values = latent_out_.as<float>();  // [n, heads, value_dim]
  for (int64_t h = 0; h < heads; ++h) {
    backend_.CopyColumns(attn + h * d, heads * d, n, rank, in, rank);
    backend_.MatMul(w.wv_b[h], in, n, out);
    backend_.CopyColumns(out, a.value_dim, n, a.value_dim, values + h * a.value_dim,
                         heads * a.value_dim);
  }
  QueueRowParallel(w.wo, wv.bo, values, n, xb);
}

}  // namespace baton::engine
