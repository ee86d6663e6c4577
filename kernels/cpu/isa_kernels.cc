#include "kernels/cpu/isa_kernels.h"

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <algorithm>

#include "absl/log/check.h"
#include "kernels/cpu/cpu_isa.h"
#include "kernels/dtype.h"

namespace baton::kernels {
namespace {

// One block of the symmetric 8-bit activation quantization: d = max|x| / 127,
// q = round(x * (127 / max|x|)) (nearest, ties to even, as the SIMD conversions do; the multiplier
// is GGML's quantize_row_q8_0/q8_1, which can differ from 1 / d in the last bit). Returns d; writes
// the sum of q.
float QuantizeBlock(const float* x, int n, int8_t* qs, int32_t* sum) {
  float amax = 0.0f;
  for (int k = 0; k < n; ++k) amax = std::fmax(amax, std::fabs(x[k]));
  const float d = amax / 127.0f;
  const float id = d != 0.0f ? 127.0f / amax : 0.0f;
  int32_t total = 0;
  for (int k = 0; k < n; ++k) {
    const float scaled = x[k] * id;
    const int32_t q = static_cast<int32_t>(std::nearbyint(scaled));
    qs[k] = static_cast<int8_t>(q);
    total += q;
  }
  *sum = total;
  return d;
}

IsaKernels MakeScalar() {
  IsaKernels k;
  k.isa = CpuIsa::kScalar;
  k.quantize_q8_1 = QuantizeRowQ8_1Scalar;
  k.quantize_q8_k = QuantizeRowQ8_KScalar;
  k.add = AddScalar;
  k.round_to_f16_unbounded = RoundToF16UnboundedScalar;
  k.rms_norm_row = RmsNormRowScalar;
  return k;
}

}  // namespace

ActivationFormat ActivationFormatFor(const IsaKernels& kernels, DType dtype) {
  switch (dtype) {
    case DType::kQ4_0:
    case DType::kQ4_1:
    case DType::kQ5_0:
    case DType::kQ5_1:
    case DType::kQ8_0:
      return ActivationFormat::kQ8_1;
    case DType::kQ2_K:
    case DType::kQ3_K:
    case DType::kQ4_K:
    case DType::kQ5_K:
    case DType::kQ6_K:
      return ActivationFormat::kQ8_K;
    case DType::kBF16:
      return kernels.to_bf16_row != nullptr ? ActivationFormat::kBF16 : ActivationFormat::kF32;
    default:
      return ActivationFormat::kF32;
  }
}

int64_t ActivationScaleStride(ActivationFormat format, int64_t n_cols) {
  switch (format) {
    case ActivationFormat::kQ8_1:
      return (n_cols / kQ8_1BlockSize + 7) / 8 * 8;
    case ActivationFormat::kQ8_K:
      return (n_cols / kQ8_KBlockSize + 7) / 8 * 8;
    case ActivationFormat::kF32:
    case ActivationFormat::kBF16:
      break;
  }
  return 0;
}

void QuantizeRowQ8_1Scalar(const float* x, int64_t n_cols, int8_t* qs, float* d, float* s) {
  for (int64_t b = 0; b < n_cols / kQ8_1BlockSize; ++b) {
    int32_t sum;
    d[b] = QuantizeBlock(x + b * kQ8_1BlockSize, kQ8_1BlockSize, qs + b * kQ8_1BlockSize, &sum);
    s[b] = d[b] * static_cast<float>(sum);
  }
}

void QuantizeRowQ8_KScalar(const float* x, int64_t n_cols, int8_t* qs, float* d,
                           int16_t* bsums) {
  for (int64_t b = 0; b < n_cols / kQ8_KBlockSize; ++b) {
    int32_t sum;
    int8_t* q = qs + b * kQ8_KBlockSize;
    d[b] = QuantizeBlock(x + b * kQ8_KBlockSize, kQ8_KBlockSize, q, &sum);
    for (int g = 0; g < kQ8_KBlockSize / 16; ++g) {
      int32_t group = 0;
      for (int k = 0; k < 16; ++k) group += q[16 * g + k];
      bsums[b * 16 + g] = static_cast<int16_t>(group);
    }
  }
}

void Q8_1BlockSums(const int8_t* qs, int64_t n_cols, int32_t* sums) {
  for (int64_t b = 0; b < n_cols / kQ8_1BlockSize; ++b) {
    int32_t sum = 0;
    for (int k = 0; k < kQ8_1BlockSize; ++k) sum += qs[b * kQ8_1BlockSize + k];
    sums[b] = sum;
  }
}

void AttentionInitState(int32_t group, int32_t head_dim, float* state) {
  const int64_t size = AttentionPartialSize(head_dim);
  for (int32_t g = 0; g < group; ++g) {
    float* s = state + g * size;
    s[0] = -INFINITY;
    std::fill(s + 1, s + size, 0.0f);
  }
}

void AttentionFoldSinks(const float* sinks, int32_t group, int32_t head_dim, float* state) {
  const int64_t size = AttentionPartialSize(head_dim);
  for (int32_t g = 0; g < group; ++g) {
    float* s = state + g * size;
    if (sinks[g] > s[0]) {
      const float rescale = std::exp(s[0] - sinks[g]);
      s[0] = sinks[g];
      s[1] = s[1] * rescale + 1.0f;
      for (int32_t d = 0; d < head_dim; ++d) s[2 + d] *= rescale;
    } else {
      s[1] += std::exp(sinks[g] - s[0]);
    }
  }
}

MatMulRowsFn MatMulKernelFor(const IsaKernels& kernels, DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return kernels.matmul_f32;
    case DType::kF16:
      return kernels.matmul_f16;
    case DType::kBF16:
      return kernels.matmul_bf16;
    case DType::kQ4_0:
      return kernels.matmul_q4_0;
    case DType::kQ4_1:
      return kernels.matmul_q4_1;
    case DType::kQ8_0:
      return kernels.matmul_q8_0;
    case DType::kQ5_0:
      return kernels.matmul_q5_0;
    case DType::kQ5_1:
      return kernels.matmul_q5_1;
    case DType::kQ4_K:
      return kernels.matmul_q4_k;
    case DType::kQ5_K:
      return kernels.matmul_q5_k;
    case DType::kQ6_K:
      return kernels.matmul_q6_k;
    case DType::kQ2_K:
      return kernels.matmul_q2_k;
    case DType::kQ3_K:
      return kernels.matmul_q3_k;
    default:
      return nullptr;
  }
}

MatMulRowsFn PackedMatMulKernelFor(const IsaKernels& kernels, DType dtype) {
  switch (dtype) {
    case DType::kQ4_0:
      return kernels.matmul_packed_q4_0;
    case DType::kQ4_1:
      return kernels.matmul_packed_q4_1;
    case DType::kQ8_0:
      return kernels.matmul_packed_q8_0;
    case DType::kQ5_0:
      return kernels.matmul_packed_q5_0;
    case DType::kQ5_1:
      return kernels.matmul_packed_q5_1;
    default:
      return nullptr;
  }
}

const IsaKernels& KernelsFor(CpuIsa isa) {
  CHECK(isa <= DetectCpuIsaUncapped())
      << "CPU kernels for " << CpuIsaName(isa) << " requested on a CPU with only "
      << CpuIsaName(DetectCpuIsaUncapped());
  static const IsaKernels scalar = MakeScalar();
  static const IsaKernels avx2 = [] {
    IsaKernels k = MakeScalar();
    if (DetectCpuIsaUncapped() >= CpuIsa::kAvx2) FillAvx2Kernels(&k);
    return k;
  }();
  static const IsaKernels avx512 = [] {
    IsaKernels k = avx2;
    if (DetectCpuIsaUncapped() >= CpuIsa::kAvx512Vnni) {
      FillAvx512VnniKernels(&k);
      FillPackedAvx512Kernels(&k);
      if (Bf16DotProducts(CpuIsa::kAvx512Vnni)) FillBf16Avx512Kernels(&k);
    }
    return k;
  }();
  static const IsaKernels amx = [] {
    IsaKernels k = avx512;
    if (DetectCpuIsaUncapped() >= CpuIsa::kAmx) FillAmxKernels(&k);
    return k;
  }();
  switch (isa) {
    case CpuIsa::kScalar:
      return scalar;
    case CpuIsa::kAvx2:
      return avx2;
    case CpuIsa::kAvx512Vnni:
      return avx512;
    case CpuIsa::kAmx:
      return amx;
  }
  return scalar;
}

}  // namespace baton::kernels
