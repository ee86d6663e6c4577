// Test-only helpers for the kernel tests and benchmarks: deterministic random data, weight
// matrices of every type (quantized by kernels/cpu/quantize.h, or random bits with sane scales),
// buffers with canary values around them, and error norms. Header-only.
//
// Thread-safety: free functions on their arguments.
#ifndef BATON_TESTS_KERNELS_KERNEL_TEST_UTIL_H_
#define BATON_TESTS_KERNELS_KERNEL_TEST_UTIL_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "kernels/backend.h"
#include "kernels/cpu/cpu_isa.h"
#include "kernels/cpu/dequantize.h"
#include "kernels/cpu/isa_kernels.h"
#include "kernels/cpu/quantize.h"
#include "kernels/dtype.h"
#include "kernels/half.h"

namespace baton::kernels::testing {

inline std::vector<float> RandomFloats(int64_t n, uint64_t seed, float scale = 1.0f) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& f : v) f = dist(rng);
  return v;
}

inline void PutF16(uint8_t* p, float f) {
  const uint16_t h = F32ToF16(f);
  std::memcpy(p, &h, sizeof h);
}

// Replaces every f16 scale field of the quantized blocks in a row of `n` values of dtype (bytes
// `out`) with a sane random scale; false for the types without block scales (the float types).
inline bool PutSaneScales(DType dtype, int64_t n, std::mt19937_64& rng, uint8_t* out) {
  std::uniform_real_distribution<float> scale(0.001f, 0.05f);
  const DTypeTraits& t = Traits(dtype);
  for (int64_t b = 0; b < n / t.block_size; ++b) {
    uint8_t* block = out + b * t.block_bytes;
    switch (dtype) {
      case DType::kQ4_0:
      case DType::kQ5_0:
      case DType::kQ8_0:
        PutF16(block, scale(rng));
        break;
      case DType::kQ4_1:
      case DType::kQ5_1:
        PutF16(block, scale(rng));
        PutF16(block + 2, -8.0f * scale(rng));
        break;
      case DType::kQ4_K:
      case DType::kQ5_K:
        PutF16(block, scale(rng) / 16.0f);
        PutF16(block + 2, scale(rng) / 16.0f);
        break;
      case DType::kQ6_K:
        PutF16(block + 208, scale(rng) / 64.0f);
        break;
      case DType::kQ2_K:
        PutF16(block + 80, scale(rng) / 8.0f);
        PutF16(block + 82, scale(rng) / 8.0f);
        break;
      case DType::kQ3_K:
        PutF16(block + 108, scale(rng) / 16.0f);
        break;
      default:
        return false;
    }
  }
  return true;
}

// Random bytes with every f16 scale field replaced by a sane random scale: exercises all bit
// patterns of the quantized values (negative Q6_K scales, extreme nibbles) that round-to-nearest
// quantization of smooth data rarely produces. Plain types get quantized random floats.
inline void RandomBitsRow(DType dtype, int64_t n, std::mt19937_64& rng, uint8_t* out) {
  std::uniform_int_distribution<int> byte(0, 255);
  const int64_t bytes = RowBytes(dtype, n);
  for (int64_t k = 0; k < bytes; ++k) out[k] = static_cast<uint8_t>(byte(rng));
  if (!PutSaneScales(dtype, n, rng, out)) {
    const std::vector<float> v = RandomFloats(n, rng());
    QuantizeRow(dtype, v.data(), n, out);
  }
}

// Every quantized value at the largest magnitude of its type (all value bits set: Q4 15, Q5 31,
// Q6_K 63, Q2_K 3, Q3_K 7 unsigned; Q8_0's bytes -128), every other byte all ones too (the
// unsigned integer scales and minimums at their largest, Q6_K's int8 scales -1), and sane f16
// scales: the largest integer sums the kernels form. Quantized types only.
inline void LargestValuesRow(DType dtype, int64_t n, std::mt19937_64& rng, uint8_t* out) {
  std::memset(out, dtype == DType::kQ8_0 ? 0x80 : 0xff, static_cast<size_t>(RowBytes(dtype, n)));
  PutSaneScales(dtype, n, rng, out);
}

// "q4_K_37x768_n5": a test's name for a weight type and a MatMul shape (rows x cols, n
// activation rows).
// The CPU ISA levels with SIMD kernels, for tests parameterized by level.
inline constexpr CpuIsa kSimdIsas[] = {CpuIsa::kAvx2, CpuIsa::kAvx512Vnni, CpuIsa::kAmx};

// Why this CPU cannot run `isa`'s kernels, "" when it can. A test of one level skips with it
// (GTEST_SKIP), so that ctest's summary lists what this machine did not check:
//   if (const std::string why = MissingIsa(isa); !why.empty()) GTEST_SKIP() << why;
inline std::string MissingIsa(CpuIsa isa) {
  if (isa <= DetectCpuIsaUncapped()) return "";
  return "this CPU has no " + std::string(CpuIsaName(isa)) + " (it has " +
         std::string(CpuIsaName(DetectCpuIsaUncapped())) + ")";
}

// The level's name as a test parameter's name ("avx512_vnni").
inline std::string IsaCaseName(CpuIsa isa) {
  std::string name(CpuIsaName(isa));
  std::replace(name.begin(), name.end(), '-', '_');
  return name;
}

inline std::string MatMulCaseName(DType dtype, int64_t rows, int64_t cols, int64_t n) {
  return std::string(DTypeName(dtype)) + "_" + std::to_string(rows) + "x" + std::to_string(cols) +
         "_n" + std::to_string(n);
}

// The products of one weight type at one CPU level: a test of it walks every shape (one test a
// shape would multiply the test processes by the shapes).
using LevelTypeParam = std::tuple<CpuIsa, DType>;

inline std::string LevelTypeCaseName(const LevelTypeParam& param) {
  return IsaCaseName(std::get<0>(param)) + "_" + std::string(DTypeName(std::get<1>(param)));
}

// A weight matrix owning its bytes.
struct TestWeights {
  DType dtype = DType::kF32;
  int64_t n_rows = 0;
  int64_t n_cols = 0;
  std::vector<uint8_t> bytes;

  WeightMatrix matrix() const {
    return WeightMatrix{.dtype = dtype, .n_rows = n_rows, .n_cols = n_cols, .data = bytes.data()};
  }
  // The dequantized values [n_rows, n_cols].
  std::vector<float> Dequantized() const {
    std::vector<float> out(static_cast<size_t>(n_rows * n_cols));
    const int64_t row_bytes = RowBytes(dtype, n_cols);
    for (int64_t r = 0; r < n_rows; ++r) {
      DequantizeRow(dtype, bytes.data() + r * row_bytes, out.data() + r * n_cols, n_cols);
    }
    return out;
  }
};

// Rows of random normal values (scale `scale`) quantized to dtype, or random bits (see above).
inline TestWeights MakeWeights(DType dtype, int64_t n_rows, int64_t n_cols, uint64_t seed,
                               bool random_bits = false, float scale = 0.05f) {
  TestWeights w{.dtype = dtype, .n_rows = n_rows, .n_cols = n_cols, .bytes = {}};
  const int64_t row_bytes = RowBytes(dtype, n_cols);
  w.bytes.resize(static_cast<size_t>(n_rows * row_bytes));
  std::mt19937_64 rng(seed);
  for (int64_t r = 0; r < n_rows; ++r) {
    if (random_bits) {
      RandomBitsRow(dtype, n_cols, rng, w.bytes.data() + r * row_bytes);
    } else {
      const std::vector<float> v = RandomFloats(n_cols, rng(), scale);
      QuantizeRow(dtype, v.data(), n_cols, w.bytes.data() + r * row_bytes);
    }
  }
  return w;
}

// A float buffer with kGuard canary values on each side of the `size` usable ones.
class GuardedBuffer {
 public:
  static constexpr int64_t kGuard = 64;
  static constexpr float kCanary = -1234.5678f;

  explicit GuardedBuffer(int64_t size, float fill = kCanary)
      : size_(size), storage_(static_cast<size_t>(size + 2 * kGuard), kCanary) {
    std::fill(data(), data() + size, fill);
  }
  float* data() { return storage_.data() + kGuard; }
  const float* data() const { return storage_.data() + kGuard; }
  int64_t size() const { return size_; }
  float operator[](int64_t i) const { return data()[i]; }
  // Whether the values around the usable range are untouched.
  bool CanariesIntact() const {
    for (int64_t i = 0; i < kGuard; ++i) {
      if (!SameBits(storage_[i], kCanary) ||
          !SameBits(storage_[storage_.size() - 1 - i], kCanary)) {
        return false;
      }
    }
    return true;
  }
  std::vector<float> ToVector() const { return std::vector<float>(data(), data() + size_); }

 private:
  static bool SameBits(float a, float b) { return std::memcmp(&a, &b, sizeof a) == 0; }
  int64_t size_;
  std::vector<float> storage_;
};

inline bool AllFinite(const float* v, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    if (!std::isfinite(v[i])) return false;
  }
  return true;
}

// ||a - b||_2 / ||b||_2 over n values (||a - b||_2 when b is all zero).
inline double RelativeL2Error(const float* a, const float* b, int64_t n) {
  double err = 0.0, norm = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    const double d = static_cast<double>(a[i]) - b[i];
    err += d * d;
    norm += static_cast<double>(b[i]) * b[i];
  }
  return norm > 0.0 ? std::sqrt(err / norm) : std::sqrt(err);
}

// max |a - b| / rms(b) over n values.
inline double MaxErrorOverRms(const float* a, const float* b, int64_t n) {
  double max_err = 0.0, norm = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    max_err = std::max(max_err, std::fabs(static_cast<double>(a[i]) - b[i]));
    norm += static_cast<double>(b[i]) * b[i];
  }
  const double rms = std::sqrt(norm / std::max<int64_t>(n, 1));
  return rms > 0.0 ? max_err / rms : max_err;
}

// x [n, cols] as the activations the kernels of dtype read (isa_kernels.h): f32 as given for the
// float types (or rounded to BF16 where the level multiplies BF16 so), else quantized to kQ8_K,
// with the rows up to a multiple of 16 readable and their scales zero.
class KernelActivations {
 public:
  KernelActivations(const IsaKernels& kernels, DType dtype, const std::vector<float>& x,
                    int64_t n, int64_t cols)
      : x_(x),
        format_(ActivationFormatFor(kernels, dtype)),
        stride_(ActivationScaleStride(ActivationFormat::kQ8_K, cols)),
        qs_((n + 15) / 16 * 16 * cols),
        d_((n + 15) / 16 * 16 * stride_, 0.0f),
        bsums_(n * cols / 16) {
    if (format_ == ActivationFormat::kBF16) {
      bf16_.resize(n * Bf16RowValues(cols));
      for (int64_t i = 0; i < n; ++i) {
        kernels.to_bf16_row(x.data() + i * cols, cols, bf16_.data() + i * Bf16RowValues(cols));
      }
    }
    if (format_ != ActivationFormat::kQ8_K) return;
    for (int64_t i = 0; i < n; ++i) {
      QuantizeRowQ8_KScalar(x.data() + i * cols, cols, qs_.data() + i * cols,
                            d_.data() + i * stride_, bsums_.data() + i * cols / 16);
    }
  }
  MatMulActivations view() const {
    if (format_ == ActivationFormat::kF32) return {.f32 = x_.data()};
    if (format_ == ActivationFormat::kBF16) return {.bf16 = bf16_.data()};
    return {.qs = qs_.data(), .d = d_.data(), .bsums = bsums_.data(), .scale_stride = stride_};
  }

 private:
  const std::vector<float>& x_;
  ActivationFormat format_;
  int64_t stride_;
  std::vector<int8_t> qs_;
  std::vector<float> d_;
  std::vector<int16_t> bsums_;
  std::vector<uint16_t> bf16_;
};

}  // namespace baton::kernels::testing

#endif  // BATON_TESTS_KERNELS_KERNEL_TEST_UTIL_H_
