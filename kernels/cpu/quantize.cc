#include "kernels/cpu/quantize.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <utility>

#include "absl/log/check.h"
#include "absl/strings/match.h"
#include "kernels/half.h"

namespace baton::kernels {
namespace {

void PutF16(uint8_t* p, float f) {
  const uint16_t h = F32ToF16(f);
  std::memcpy(p, &h, sizeof h);
}

int Clamp(int v, int lo, int hi) { return std::min(hi, std::max(lo, v)); }

int Round(float f) { return static_cast<int>(std::nearbyint(f)); }

void QuantizeQ8_0(const float* x, int64_t n, uint8_t* out) {
  for (int64_t b = 0; b < n / 32; ++b, x += 32, out += 34) {
    float amax = 0.0f;
    for (int k = 0; k < 32; ++k) amax = std::max(amax, std::fabs(x[k]));
    PutF16(out, amax / 127.0f);
    const float d = F16ToF32(F32ToF16(amax / 127.0f));
    for (int k = 0; k < 32; ++k) {
      out[2 + k] = static_cast<uint8_t>(static_cast<int8_t>(
          d == 0.0f ? 0 : Clamp(Round(x[k] / d), -127, 127)));
    }
  }
}

// Q4_0 / Q5_0 (with_min false) and Q4_1 / Q5_1 (with_min true), `bits` 4 or 5. Element k < 16
// is the low nibble of qs[k], element k + 16 the high nibble; Q5's fifth bit of element k is bit k
// of the u32 qh before qs.
void QuantizeBlock32(const float* x, int64_t n, uint8_t* out, int bits, bool with_min) {
  const int top = (1 << bits) - 1;  // 15 or 31
  const int qh_bytes = bits == 5 ? 4 : 0;
  const int bytes = (with_min ? 4 : 2) + qh_bytes + 16;
  for (int64_t b = 0; b < n / 32; ++b, x += 32, out += bytes) {
    int q[32];
    if (with_min) {
      float lo = x[0], hi = x[0];
      for (int k = 0; k < 32; ++k) lo = std::min(lo, x[k]), hi = std::max(hi, x[k]);
      PutF16(out, (hi - lo) / top);
      PutF16(out + 2, lo);
      const float d = F16ToF32(F32ToF16((hi - lo) / top));
      const float m = F16ToF32(F32ToF16(lo));
      for (int k = 0; k < 32; ++k) q[k] = d == 0.0f ? 0 : Clamp(Round((x[k] - m) / d), 0, top);
    } else {
      const int zero = (top + 1) / 2;  // 8 or 16
      float amax = 0.0f;
      for (int k = 0; k < 32; ++k) amax = std::max(amax, std::fabs(x[k]));
      PutF16(out, amax / (zero - 1));
      const float d = F16ToF32(F32ToF16(amax / (zero - 1)));
      for (int k = 0; k < 32; ++k) q[k] = d == 0.0f ? zero : Clamp(Round(x[k] / d) + zero, 0, top);
    }
    uint8_t* qh = out + (with_min ? 4 : 2);
    uint8_t* qs = qh + qh_bytes;
    if (bits == 5) {
      uint32_t high = 0;
      for (int k = 0; k < 32; ++k) high |= static_cast<uint32_t>(q[k] >> 4) << k;
      std::memcpy(qh, &high, sizeof high);
    }
    for (int k = 0; k < 16; ++k) {
      qs[k] = static_cast<uint8_t>((q[k] & 15) | ((q[k + 16] & 15) << 4));
    }
  }
}

// For each of the n_groups groups of `group` values: value ~ scale * q - min with q in
// 0..levels and min = -min(0, lowest value) >= 0. Returns the largest scale and the largest min
// (Q2_K, Q4_K, Q5_K).
std::pair<float, float> AsymmetricGroupScales(const float* x, int group, int n_groups,
                                              float levels, float* scale, float* min) {
  float max_scale = 0.0f, max_min = 0.0f;
  for (int g = 0; g < n_groups; ++g) {
    float lo = 0.0f, hi = x[group * g];
    for (int k = 0; k < group; ++k) {
      lo = std::min(lo, x[group * g + k]);
      hi = std::max(hi, x[group * g + k]);
    }
    scale[g] = (hi - lo) / levels;
    min[g] = -lo;
    max_scale = std::max(max_scale, scale[g]);
    max_min = std::max(max_min, min[g]);
  }
  return {max_scale, max_min};
}

// Q4_K (bits 4) and Q5_K (bits 5, the fifth bit of value l of sub-block s in bit s of qh[l]).
void QuantizeKQuant45(const float* x, int64_t n, uint8_t* out, int bits) {
  const int top = (1 << bits) - 1;
  const int block_bytes = bits == 5 ? 176 : 144;
  for (int64_t b = 0; b < n / 256; ++b, x += 256, out += block_bytes) {
    float scale[8], min[8];  // per sub-block: value ~ scale * q - min, min >= 0
    const auto [max_scale, max_min] =
        AsymmetricGroupScales(x, 32, 8, static_cast<float>(top), scale, min);
    PutF16(out, max_scale / 63.0f);
    PutF16(out + 2, max_min / 63.0f);
    const float d = F16ToF32(F32ToF16(max_scale / 63.0f));
    const float dmin = F16ToF32(F32ToF16(max_min / 63.0f));
    int sc[8], mn[8];
    for (int s = 0; s < 8; ++s) {
      sc[s] = d == 0.0f ? 0 : Clamp(Round(scale[s] / d), 0, 63);
      mn[s] = dmin == 0.0f ? 0 : Clamp(Round(min[s] / dmin), 0, 63);
    }
    uint8_t* packed = out + 4;
    for (int j = 0; j < 4; ++j) {
      packed[j] = static_cast<uint8_t>(sc[j] | ((sc[j + 4] >> 4) << 6));
      packed[j + 4] = static_cast<uint8_t>(mn[j] | ((mn[j + 4] >> 4) << 6));
      packed[j + 8] = static_cast<uint8_t>((sc[j + 4] & 0x0f) | ((mn[j + 4] & 0x0f) << 4));
    }
    int q[256];
    for (int s = 0; s < 8; ++s) {
      const float ds = d * static_cast<float>(sc[s]);
      const float ms = dmin * static_cast<float>(mn[s]);
      for (int k = 0; k < 32; ++k) {
        q[32 * s + k] = ds == 0.0f ? 0 : Clamp(Round((x[32 * s + k] + ms) / ds), 0, top);
      }
    }
    uint8_t* qh = out + 16;
    uint8_t* qs = qh + (bits == 5 ? 32 : 0);
    if (bits == 5) {
      for (int l = 0; l < 32; ++l) {
        qh[l] = 0;
        for (int s = 0; s < 8; ++s) qh[l] |= static_cast<uint8_t>((q[32 * s + l] >> 4) << s);
      }
    }
    for (int g = 0; g < 4; ++g) {
      for (int l = 0; l < 32; ++l) {
        qs[32 * g + l] =
            static_cast<uint8_t>((q[64 * g + l] & 15) | ((q[64 * g + 32 + l] & 15) << 4));
      }
    }
  }
}

// The scale of each group of 16 values that maps its largest magnitude to `levels`; returns the
// largest of the 16 (Q3_K and Q6_K).
float SymmetricGroupScales(const float* x, float levels, float (&scale)[16]) {
  float max_scale = 0.0f;
  for (int g = 0; g < 16; ++g) {
    float amax = 0.0f;
    for (int k = 0; k < 16; ++k) amax = std::max(amax, std::fabs(x[16 * g + k]));
    scale[g] = amax / levels;
    max_scale = std::max(max_scale, scale[g]);
  }
  return max_scale;
}

void QuantizeQ6_K(const float* x, int64_t n, uint8_t* out) {
  for (int64_t b = 0; b < n / 256; ++b, x += 256, out += 210) {
    float scale[16];
    const float max_scale = SymmetricGroupScales(x, 31.0f, scale);
    PutF16(out + 208, max_scale / 127.0f);
    const float d = F16ToF32(F32ToF16(max_scale / 127.0f));
    int8_t* sc = reinterpret_cast<int8_t*>(out + 192);
    int q[256];
    for (int s = 0; s < 16; ++s) {
      sc[s] = static_cast<int8_t>(d == 0.0f ? 0 : Clamp(Round(scale[s] / d), -127, 127));
      const float ds = d * static_cast<float>(sc[s]);
      for (int k = 0; k < 16; ++k) {
        q[16 * s + k] = ds == 0.0f ? 32 : Clamp(Round(x[16 * s + k] / ds) + 32, 0, 63);
      }
    }
    for (int h = 0; h < 2; ++h) {
      uint8_t* ql = out + 64 * h;
      uint8_t* qh = out + 128 + 32 * h;
      const int* qq = q + 128 * h;
      for (int l = 0; l < 32; ++l) {
        ql[l] = static_cast<uint8_t>((qq[l] & 0x0f) | ((qq[l + 64] & 0x0f) << 4));
        ql[l + 32] = static_cast<uint8_t>((qq[l + 32] & 0x0f) | ((qq[l + 96] & 0x0f) << 4));
        qh[l] = static_cast<uint8_t>((qq[l] >> 4) | ((qq[l + 32] >> 4) << 2) |
                                     ((qq[l + 64] >> 4) << 4) | ((qq[l + 96] >> 4) << 6));
      }
    }
  }
}

// Q2_K: value d * sc * q - dmin * m per group of 16 (sc, m 4-bit, q 2-bit); element 32s + l of
// half h is bits 2s..2s+1 of qs[32h + l].
void QuantizeQ2_K(const float* x, int64_t n, uint8_t* out) {
  for (int64_t b = 0; b < n / 256; ++b, x += 256, out += 84) {
    float scale[16], min[16];
    const auto [max_scale, max_min] = AsymmetricGroupScales(x, 16, 16, 3.0f, scale, min);
    PutF16(out + 80, max_scale / 15.0f);
    PutF16(out + 82, max_min / 15.0f);
    const float d = F16ToF32(F32ToF16(max_scale / 15.0f));
    const float dmin = F16ToF32(F32ToF16(max_min / 15.0f));
    uint8_t* qs = out + 16;
    std::memset(qs, 0, 64);
    for (int g = 0; g < 16; ++g) {
      const int sc = d == 0.0f ? 0 : Clamp(Round(scale[g] / d), 0, 15);
      const int mn = dmin == 0.0f ? 0 : Clamp(Round(min[g] / dmin), 0, 15);
      out[g] = static_cast<uint8_t>(sc | (mn << 4));
      const float ds = d * static_cast<float>(sc);
      for (int k = 0; k < 16; ++k) {
        const int i = 16 * g + k;
        const int q = ds == 0.0f ? 0 : Clamp(Round((x[i] + dmin * mn) / ds), 0, 3);
        qs[32 * (i / 128) + i % 32] |= static_cast<uint8_t>(q << (2 * (i % 128 / 32)));
      }
    }
  }
}

// Q3_K: value d * sc * q per group of 16 (sc signed 6-bit, stored + 32; q in -4..3 as the 2 low
// bits of q + 4 in qs, as Q2_K's, and bit (i / 32) of hmask[i % 32] set when q + 4 >= 4).
void QuantizeQ3_K(const float* x, int64_t n, uint8_t* out) {
  for (int64_t b = 0; b < n / 256; ++b, x += 256, out += 110) {
    float scale[16];
    const float max_scale = SymmetricGroupScales(x, 4.0f, scale);
    PutF16(out + 108, max_scale / 31.0f);
    const float d = F16ToF32(F32ToF16(max_scale / 31.0f));
    uint8_t* hmask = out;
    uint8_t* qs = out + 32;
    uint8_t* packed = out + 96;
    std::memset(out, 0, 108);
    for (int g = 0; g < 16; ++g) {
      const int sc = d == 0.0f ? 0 : Clamp(Round(scale[g] / d), -32, 31);
      const int stored = sc + 32;
      packed[g % 8] |= static_cast<uint8_t>((stored & 15) << (g < 8 ? 0 : 4));
      packed[8 + g % 4] |= static_cast<uint8_t>((stored >> 4) << (2 * (g / 4)));
      const float ds = d * static_cast<float>(sc);
      for (int k = 0; k < 16; ++k) {
        const int i = 16 * g + k;
        const int u = (ds == 0.0f ? 0 : Clamp(Round(x[i] / ds), -4, 3)) + 4;
        qs[32 * (i / 128) + i % 32] |= static_cast<uint8_t>((u & 3) << (2 * (i % 128 / 32)));
        hmask[i % 32] |= static_cast<uint8_t>((u >> 2) << (i / 32));
      }
    }
  }
}

}  // namespace

bool CanQuantize(DType dtype) {
  switch (dtype) {
    case DType::kF32:
    case DType::kF16:
    case DType::kBF16:
    case DType::kQ4_0:
    case DType::kQ4_1:
    case DType::kQ5_0:
    case DType::kQ5_1:
    case DType::kQ8_0:
    case DType::kQ2_K:
    case DType::kQ3_K:
    case DType::kQ4_K:
    case DType::kQ5_K:
    case DType::kQ6_K:
      return true;
    default:
      return false;
  }
}

void QuantizeRow(DType dtype, const float* x, int64_t n, uint8_t* out) {
  switch (dtype) {
    case DType::kF32:
      std::memcpy(out, x, static_cast<size_t>(n) * sizeof(float));
      return;
    case DType::kF16:
      for (int64_t k = 0; k < n; ++k) PutF16(out + 2 * k, x[k]);
      return;
    case DType::kBF16:
      for (int64_t k = 0; k < n; ++k) {
        const uint16_t h = F32ToBF16(x[k]);
        std::memcpy(out + 2 * k, &h, sizeof h);
      }
      return;
    case DType::kQ4_0:
      return QuantizeBlock32(x, n, out, 4, false);
    case DType::kQ4_1:
      return QuantizeBlock32(x, n, out, 4, true);
    case DType::kQ5_0:
      return QuantizeBlock32(x, n, out, 5, false);
    case DType::kQ5_1:
      return QuantizeBlock32(x, n, out, 5, true);
    case DType::kQ8_0:
      return QuantizeQ8_0(x, n, out);
    case DType::kQ2_K:
      return QuantizeQ2_K(x, n, out);
    case DType::kQ3_K:
      return QuantizeQ3_K(x, n, out);
    case DType::kQ4_K:
      return QuantizeKQuant45(x, n, out, 4);
    case DType::kQ5_K:
      return QuantizeKQuant45(x, n, out, 5);
    case DType::kQ6_K:
      return QuantizeQ6_K(x, n, out);
    default:
      CHECK(false) << "QuantizeRow: no encoder for " << DTypeName(dtype);
  }
}

std::optional<DType> QuantizableTypeNamed(std::string_view name) {
  for (uint32_t id = 0; id <= static_cast<uint32_t>(DType::kBF16); ++id) {
    const std::optional<DTypeTraits> traits = LookupDType(id);
    if (traits && CanQuantize(traits->dtype) &&
        absl::EqualsIgnoreCase(absl::string_view(name.data(), name.size()),
                               absl::string_view(traits->name.data(), traits->name.size()))) {
      return traits->dtype;
    }
  }
  return std::nullopt;
}

}  // namespace baton::kernels
