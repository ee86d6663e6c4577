#include "kernels/cpu/reference_kernels.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "absl/log/check.h"
#include "kernels/backend.h"
#include "kernels/cpu/dequantize.h"
#include "kernels/half.h"

namespace baton::kernels::reference {
namespace {

#include "kernels/cpu/rope_rotate.inc"

}  // namespace

void MatMulRows(const WeightMatrix& w, const float* x, int64_t n, float* y, int64_t row_begin,
                int64_t row_end) {
  const int64_t row_bytes = RowBytes(w.dtype, w.n_cols);
  std::vector<float> row(static_cast<size_t>(w.n_cols));
  for (int64_t r = row_begin; r < row_end; ++r) {
    DequantizeRow(w.dtype, static_cast<const uint8_t*>(w.data) + r * row_bytes, row.data(),
                  w.n_cols);
    for (int64_t i = 0; i < n; ++i) {
      const float* xi = x + i * w.n_cols;
      double sum = 0.0;
      for (int64_t k = 0; k < w.n_cols; ++k) sum += static_cast<double>(xi[k]) * row[k];
      y[i * w.n_rows + r] = static_cast<float>(sum);
    }
  }
}

void MatMul(const WeightMatrix& w, const float* x, int64_t n, float* y) {
  MatMulRows(w, x, n, y, 0, w.n_rows);
}

void GetRows(const WeightMatrix& w, const int32_t* ids, int64_t n, float* out) {
  const int64_t row_bytes = RowBytes(w.dtype, w.n_cols);
  for (int64_t i = 0; i < n; ++i) {
    CHECK(ids[i] >= 0 && ids[i] < w.n_rows) << "GetRows: id " << ids[i] << " out of range";
    DequantizeRow(w.dtype, static_cast<const uint8_t*>(w.data) + ids[i] * row_bytes,
                  out + i * w.n_cols, w.n_cols);
  }
}

void RmsNorm(const float* x, const float* weight, int64_t n, int64_t dim, float eps, float* y) {
  for (int64_t i = 0; i < n; ++i) {
    const float* xi = x + i * dim;
    float* yi = y + i * dim;
    double sum_sq = 0.0;
    for (int64_t j = 0; j < dim; ++j) sum_sq += static_cast<double>(xi[j]) * xi[j];
    const double inv = 1.0 / std::sqrt(sum_sq / static_cast<double>(dim) + eps);
    for (int64_t j = 0; j < dim; ++j) yi[j] = static_cast<float>(xi[j] * inv * weight[j]);
  }
}

void CheckRope(const RopeParams& params, int64_t head_dim) {
  CHECK(params.n_dims >= 0 && params.n_dims % 2 == 0 && params.n_dims <= head_dim)
      << "Rope: n_dims " << params.n_dims << " with head_dim " << head_dim;
}

void RopeAngles(int32_t pos, const RopeParams& params, float* cos_sin) {
  // GGML's rope (its rope cache and rope_yarn), in f32: theta_i = pos * theta_scale^i by
  // repeated multiplication, theta_scale = base^(-2 / n_dims), divided by the frequency factor;
  // scaled by freq_scale, mixed back toward the unscaled angle by YaRN's ramp; cos/sin of that
  // in f32, times the magnitude scale.
  const float theta_scale = std::pow(params.freq_base, -2.0f / static_cast<float>(params.n_dims));
  float corr_dims[2] = {0.0f, 0.0f};
  if (params.ext_factor != 0.0f) RopeYarnCorrDims(params, corr_dims);
  const float mscale = RopeMagnitudeScale(params);
  float theta_base = static_cast<float>(pos);
  for (int64_t i = 0; i < params.n_dims / 2; ++i) {
    const float ff = params.freq_factors != nullptr ? params.freq_factors[i] : 1.0f;
    const float theta_extrap = theta_base / ff;
    const float theta_interp = params.freq_scale * theta_extrap;
    float theta = theta_interp;
    if (params.ext_factor != 0.0f) {
      const float y = (static_cast<float>(i) - corr_dims[0]) /
                      std::max(0.001f, corr_dims[1] - corr_dims[0]);
      const float ramp_mix = (1.0f - std::min(1.0f, std::max(0.0f, y))) * params.ext_factor;
      theta = theta_interp * (1.0f - ramp_mix) + theta_extrap * ramp_mix;
    }
    cos_sin[2 * i] = std::cos(theta) * mscale;
    cos_sin[2 * i + 1] = std::sin(theta) * mscale;
    theta_base *= theta_scale;
  }
}

void RopeRotate(float* x, int64_t n_heads, int64_t head_dim, const float* cos_sin,
                const RopeParams& params) {
  CheckRope(params, head_dim);
  RotateHeads(x, n_heads, head_dim, cos_sin, params);
}

void RopeToken(float* x, int64_t n_heads, int64_t head_dim, int32_t pos,
               const RopeParams& params) {
  CheckRope(params, head_dim);
  std::vector<float> cos_sin(static_cast<size_t>(params.n_dims));
  RopeAngles(pos, params, cos_sin.data());
  RopeRotate(x, n_heads, head_dim, cos_sin.data(), params);
}

void Rope(float* x, int64_t n, int64_t n_heads, int64_t head_dim, const int32_t* positions,
          const RopeParams& params) {
  for (int64_t t = 0; t < n; ++t) {
    RopeToken(x + t * n_heads * head_dim, n_heads, head_dim, positions[t], params);
  }
}

void SiluMul(const float* gate, const float* up, int64_t count, float* y) {
  for (int64_t i = 0; i < count; ++i) {
    const double g = gate[i];
    y[i] = static_cast<float>(g / (1.0 + std::exp(-g)) * up[i]);
  }
}

void SwigluOaiMul(const float* gate, const float* up, int64_t count, float* y) {
  constexpr float kAlpha = 1.702f;
  constexpr float kLimit = 7.0f;
  for (int64_t i = 0; i < count; ++i) {
    const float g = std::min(gate[i], kLimit);
    const float u = std::clamp(up[i], -kLimit, kLimit);
    y[i] = g / (1.0f + std::exp(kAlpha * -g)) * (u + 1.0f);
  }
}

void WeightedSumOfRows(const float* x, const int64_t* rows, const float* weights,
                       int64_t row_begin, int64_t row_end, int64_t k, int64_t dim, float* out) {
  for (int64_t i = row_begin; i < row_end; ++i) {
    float* o = out + i * dim;
    for (int64_t j = 0; j < k; ++j) {
      const float w = weights[i * k + j];
      const float* xr = x + rows[i * k + j] * dim;
      for (int64_t e = 0; e < dim; ++e) {
        const float product = w * xr[e];
        o[e] = j == 0 ? product : o[e] + product;
      }
    }
  }
}

uint16_t GeluF16(uint16_t h) {
  constexpr float kGeluCoefA = 0.044715f;
  constexpr float kSqrt2OverPi = 0.79788456080286535587989211986876f;
  const float x = F16ToF32(h);
  return F32ToF16(0.5f * x * (1.0f + std::tanh(kSqrt2OverPi * x * (1.0f + kGeluCoefA * x * x))));
}

namespace {

// GeluF16 of every f16 value, computed once (GGML's table).
const std::vector<uint16_t>& GeluTable() {
  static const std::vector<uint16_t>* table = [] {
    auto* t = new std::vector<uint16_t>(1 << 16);
    for (uint32_t h = 0; h < t->size(); ++h) (*t)[h] = GeluF16(static_cast<uint16_t>(h));
    return t;
  }();
  return *table;
}

}  // namespace

void GeluMul(const float* gate, const float* up, int64_t count, float* y) {
  const std::vector<uint16_t>& table = GeluTable();
  for (int64_t i = 0; i < count; ++i) {
    const float g = gate[i];
    if (g <= -10.0f) {
      y[i] = 0.0f;
    } else if (g >= 10.0f) {
      y[i] = g * up[i];
    } else {
      y[i] = F16ToF32(table[F32ToF16(g)]) * up[i];
    }
  }
}

void AttentionHead(const float* q_head, int32_t pos, int32_t h, int32_t n_head,
                   const KvLayerView& kv, float scale, const float* sinks, float* out_head) {
  CHECK(pos >= 0 && pos < kv.n_tokens) << "Attention: position " << pos << " not in the cache of "
                                       << kv.n_tokens << " tokens";
  const int32_t kv_h = h / (n_head / kv.n_kv_head);
  const int32_t d = kv.head_dim;
  const int32_t first = kv.FirstVisible(pos);
  std::vector<double> scores(static_cast<size_t>(pos) + 1);
  double max_score = -INFINITY;
  for (int32_t t = first; t <= pos; ++t) {
    const uint16_t* k = kv.k_base + kv.RowOffset(t, kv_h);
    double dot = 0.0;
    for (int32_t j = 0; j < d; ++j) dot += static_cast<double>(q_head[j]) * F16ToF32(k[j]);
    scores[t] = dot * scale;
    if (scores[t] > max_score) max_score = scores[t];
  }
  if (sinks != nullptr) max_score = std::max<double>(max_score, sinks[h]);
  std::vector<double> acc(static_cast<size_t>(d), 0.0);
  double sum = sinks != nullptr ? std::exp(sinks[h] - max_score) : 0.0;
  for (int32_t t = first; t <= pos; ++t) {
    const double p = std::exp(scores[t] - max_score);
    sum += p;
    const uint16_t* v = kv.v_base + kv.RowOffset(t, kv_h);
    for (int32_t j = 0; j < d; ++j) acc[j] += p * F16ToF32(v[j]);
  }
  for (int32_t j = 0; j < d; ++j) out_head[j] = static_cast<float>(acc[j] / sum);
}

void Attention(const float* q, const int32_t* q_positions, int64_t n_q, int32_t n_head,
               const KvLayerView& kv, float scale, const float* sinks, float* out) {
  CHECK(kv.n_kv_head > 0 && n_head % kv.n_kv_head == 0)
      << "Attention: " << n_head << " heads over " << kv.n_kv_head << " kv heads";
  const int64_t d = kv.head_dim;
  for (int64_t i = 0; i < n_q; ++i) {
    for (int32_t h = 0; h < n_head; ++h) {
      AttentionHead(q + (i * n_head + h) * d, q_positions[i], h, n_head, kv, scale, sinks,
                    out + (i * n_head + h) * d);
    }
  }
}

}  // namespace baton::kernels::reference
