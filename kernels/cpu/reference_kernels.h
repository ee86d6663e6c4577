// The scalar reference implementations of the Backend operations (kernels/backend.h): plain loops
// that are obviously correct, accumulating in double (except RoPE, which follows GGML in f32). They define what the fast kernels must
// compute and back the fast backend for whatever it does not vectorize. Each function documents
// its arguments only where they differ from the Backend method of the same name.
//
// Thread-safety: pure functions of their arguments; callers may run disjoint output ranges
// concurrently.
#ifndef BATON_KERNELS_CPU_REFERENCE_KERNELS_H_
#define BATON_KERNELS_CPU_REFERENCE_KERNELS_H_

#include <cstdint>

#include "kernels/backend.h"

namespace baton::kernels::reference {

// Output columns [row_begin, row_end) of y [n, w.n_rows] = x [n, w.n_cols] · Wᵀ: each weight row is
// dequantized (DequantizeRow) and dotted with each row of x in double.
void MatMulRows(const WeightMatrix& w, const float* x, int64_t n, float* y, int64_t row_begin,
                int64_t row_end);
void MatMul(const WeightMatrix& w, const float* x, int64_t n, float* y);

void GetRows(const WeightMatrix& w, const int32_t* ids, int64_t n, float* out);

void RmsNorm(const float* x, const float* weight, int64_t n, int64_t dim, float eps, float* y);

// Rotates one token's heads x [n_heads, head_dim] in place at position `pos`, in f32 exactly as
// GGML's rope does (the fast backend runs this too): theta_i = freq_scale * (p_i / freq_factors[i])
// (mixed with the unscaled angle, and cos/sin scaled, where RopeParams asks for YaRN)
// for i < n_dims / 2, where p_0 = pos and p_(i+1) = p_i * freq_base^(-2 / n_dims) (powf, then
// repeated f32 multiplication, as GGML's rope cache); cosf/sinf of theta_i; pairs (2i, 2i+1)
// (normal) or (i, i + n_dims/2) (NeoX) of each head become (fma(x0, c, -(x1 s)), fma(x0, s, x1 c)),
// the dims from n_dims on stay as they are. Not the double-precision formula: at positions in
// the thousands GGML's f32 angles differ from it by a few 1e-4 rad (an f32 near 3000 is 2.4e-4
// from the next), and that is what llama.cpp's models are run with.
void RopeToken(float* x, int64_t n_heads, int64_t head_dim, int32_t pos, const RopeParams& params);
// Checks params against heads of head_dim values (n_dims even, 0..head_dim).
void CheckRope(const RopeParams& params, int64_t head_dim);
// RopeToken in two steps, the same bits: the angles of pos as cos_sin[2i] = cos(theta_i),
// cos_sin[2i + 1] = sin(theta_i) for i < n_dims / 2; then the rotation of every head of x by them.
void RopeAngles(int32_t pos, const RopeParams& params, float* cos_sin);
void RopeRotate(float* x, int64_t n_heads, int64_t head_dim, const float* cos_sin,
                const RopeParams& params);
void Rope(float* x, int64_t n, int64_t n_heads, int64_t head_dim, const int32_t* positions,
          const RopeParams& params);

void SiluMul(const float* gate, const float* up, int64_t count, float* y);
void SwigluOaiMul(const float* gate, const float* up, int64_t count, float* y);

// Backend::WeightedSumOfRows for out rows [row_begin, row_end).
void WeightedSumOfRows(const float* x, const int64_t* rows, const float* weights,
                       int64_t row_begin, int64_t row_end, int64_t k, int64_t dim, float* out);

// GELU (tanh approximation, in f32) of the f16 value with bits `h`, rounded to f16: GGML's
// ggml_table_gelu_f16[h]. Backend::GeluMul's gelu(g) is GeluF16(F32ToF16(g)) for -10 < g < 10.
uint16_t GeluF16(uint16_t h);
// Backend::GeluMul.
void GeluMul(const float* gate, const float* up, int64_t count, float* y);

// One query token and one head: out [head_dim] = softmax(q·Kᵀ * scale) · V over cached tokens
// kv.FirstVisible(pos)..pos, reading the kv head h / (n_head / kv.n_kv_head); sinks[h] in the
// softmax's denominator where sinks is not null.
void AttentionHead(const float* q_head, int32_t pos, int32_t h, int32_t n_head,
                   const KvLayerView& kv, float scale, const float* sinks, float* out_head);
void Attention(const float* q, const int32_t* q_positions, int64_t n_q, int32_t n_head,
               const KvLayerView& kv, float scale, const float* sinks, float* out);

}  // namespace baton::kernels::reference

#endif  // BATON_KERNELS_CPU_REFERENCE_KERNELS_H_
