// The i-quants and MXFP4 (kernels/cpu/iquant_blocks.h) against llama.cpp's own dequantization:
// random blocks of every type and the values ggml's to_float gave for them
// (tests/data/kernels/iquant_blocks.bin, scripts/reference/make_iquant_blocks.py), bit for bit.
// Then their Q8_0 form within its stated bounds (exact for IQ4_NL and in-range MXFP4), and the
// CPU backend's MatMul on them against the f64 product of their values, the same bits registered
// or not, and the same bits as their Q8_0 form's.
#include "kernels/cpu/iquant_blocks.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/backend.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/dequantize.h"
#include "kernels/dtype.h"
#include "tests/kernels/kernel_test_util.h"
#include "tests/support/test_paths.h"

namespace baton::kernels {
namespace {

struct Sample {
  DType dtype;
  int64_t n_values = 0;
  std::vector<uint8_t> blocks;
  std::vector<float> values;  // llama.cpp's
};

uint32_t ReadU32(const std::vector<uint8_t>& bytes, size_t& at) {
  uint32_t v = 0;
  std::memcpy(&v, bytes.data() + at, sizeof v);
  at += sizeof v;
  return v;
}

std::vector<Sample> ReadSamples() {
  std::ifstream in(test_support::SourcePath("tests/data/kernels/iquant_blocks.bin"),
                   std::ios::binary);
  const std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)),
                                   std::istreambuf_iterator<char>());
  EXPECT_GT(bytes.size(), 12u);
  if (bytes.size() < 12 || std::memcmp(bytes.data(), "BIQB", 4) != 0) return {};
  size_t at = 4;
  EXPECT_EQ(ReadU32(bytes, at), 1u);
  const uint32_t n_types = ReadU32(bytes, at);
  std::vector<Sample> samples;
  for (uint32_t i = 0; i < n_types; ++i) {
    Sample s;
    s.dtype = static_cast<DType>(ReadU32(bytes, at));
    s.n_values = ReadU32(bytes, at);
    const uint32_t n_bytes = ReadU32(bytes, at);
    s.blocks.assign(bytes.begin() + at, bytes.begin() + at + n_bytes);
    at += n_bytes;
    s.values.resize(static_cast<size_t>(s.n_values));
    std::memcpy(s.values.data(), bytes.data() + at, s.values.size() * sizeof(float));
    at += s.values.size() * sizeof(float);
    samples.push_back(std::move(s));
  }
  EXPECT_EQ(at, bytes.size());
  return samples;
}

uint32_t Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

TEST(IQuantBlocksTest, TheFileCoversEveryType) {
  const std::vector<Sample> samples = ReadSamples();
  std::vector<DType> seen;
  for (const Sample& s : samples) seen.push_back(s.dtype);
  for (DType t : {DType::kIQ2_XXS, DType::kIQ2_XS, DType::kIQ2_S, DType::kIQ3_XXS, DType::kIQ3_S,
                  DType::kIQ1_S, DType::kIQ1_M, DType::kIQ4_NL, DType::kIQ4_XS, DType::kMXFP4}) {
    EXPECT_NE(std::find(seen.begin(), seen.end(), t), seen.end()) << DTypeName(t);
    EXPECT_TRUE(IsIQuantOrMxfp4(t)) << DTypeName(t);
  }
  EXPECT_FALSE(IsIQuantOrMxfp4(DType::kQ4_K));
}

TEST(IQuantBlocksTest, ValuesAreLlamaCppsBitForBit) {
  for (const Sample& s : ReadSamples()) {
    SCOPED_TRACE(std::string(DTypeName(s.dtype)));
    ASSERT_EQ(static_cast<int64_t>(s.blocks.size()), RowBytes(s.dtype, s.n_values));
    std::vector<float> values(static_cast<size_t>(s.n_values));
    DequantizeRow(s.dtype, s.blocks.data(), values.data(), s.n_values);
    int64_t differing = 0;
    for (int64_t i = 0; i < s.n_values; ++i) {
      if (Bits(values[i]) != Bits(s.values[i])) {
        if (differing++ == 0) {
          ADD_FAILURE() << "value " << i << ": " << values[i] << ", llama.cpp " << s.values[i];
        }
      }
    }
    EXPECT_EQ(differing, 0);
  }
}

// The Q8_0 form's values, and each 32 values' largest magnitude.
std::vector<float> Q8_0FormValues(const Sample& s) {
  std::vector<uint8_t> q8(static_cast<size_t>(RowBytes(DType::kQ8_0, s.n_values)));
  IQuantRowsToQ8_0(s.dtype, s.blocks.data(), 1, s.n_values, q8.data());
  std::vector<float> values(static_cast<size_t>(s.n_values));
  DequantizeRow(DType::kQ8_0, q8.data(), values.data(), s.n_values);
  return values;
}

TEST(IQuantBlocksTest, Q8_0FormIsWithinItsBound) {
  for (const Sample& s : ReadSamples()) {
    SCOPED_TRACE(std::string(DTypeName(s.dtype)));
    const std::vector<float> q8 = Q8_0FormValues(s);
    for (int64_t g = 0; g < s.n_values / 32; ++g) {
      const float* exact = s.values.data() + 32 * g;
      const uint8_t e = s.dtype == DType::kMXFP4 ? s.blocks[17 * g] : 127;  // MXFP4's exponent
      // Above 146, MXFP4's values pass f16's range: no Q8_0 block holds them (none in real files).
      if (e > 146) continue;
      const bool is_exact =
          s.dtype == DType::kIQ4_NL || (s.dtype == DType::kMXFP4 && e >= 107 && e <= 146);
      const bool two_scales =
          s.dtype == DType::kIQ2_XS || s.dtype == DType::kIQ2_S || s.dtype == DType::kIQ1_M;
      float amax = 0.0f;
      for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(exact[j]));
      for (int j = 0; j < 32; ++j) {
        const float got = q8[32 * g + j];
        const float error = std::fabs(got - exact[j]);
        if (is_exact) {
          ASSERT_EQ(Bits(got), Bits(exact[j])) << "group " << g << " value " << j;
        } else if (two_scales) {
          // Half a step, the step's f16 rounding, and below f16's normal range its subnormal
          // step (2^-24) times 127.
          ASSERT_LE(error, amax / 254.0f * 1.01f + amax * 0x1p-11f + 0x1p-17f)
              << "group " << g << " value " << j;
        } else {
          // The scale's f16 rounding (below f16's normal range, its subnormal step).
          ASSERT_LE(error, std::fabs(exact[j]) * 0x1p-11f + 0x1p-17f)
              << "group " << g << " value " << j;
        }
      }
    }
  }
}

// y [n, n_rows] in f64 from the values.
std::vector<double> ExactProduct(const std::vector<float>& w, int64_t n_rows, int64_t n_cols,
                                 const std::vector<float>& x, int64_t n) {
  std::vector<double> y(static_cast<size_t>(n * n_rows));
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t r = 0; r < n_rows; ++r) {
      double sum = 0.0;
      for (int64_t k = 0; k < n_cols; ++k) sum += double{w[r * n_cols + k]} * x[i * n_cols + k];
      y[i * n_rows + r] = sum;
    }
  }
  return y;
}

// The sample's values as a matrix of 4 rows (bounded to a sane range: the MXFP4 sample holds
// extreme exponents, which the product's error bound below does not cover).
TEST(IQuantBlocksTest, CpuMatMulMultipliesTheirValues) {
  for (const Sample& s : ReadSamples()) {
    if (s.dtype == DType::kMXFP4) continue;  // below, with sane exponents
    SCOPED_TRACE(std::string(DTypeName(s.dtype)));
    const int64_t n_rows = 4;
    const int64_t n_cols = s.n_values / n_rows;
    const WeightMatrix w{
        .dtype = s.dtype, .n_rows = n_rows, .n_cols = n_cols, .data = s.blocks.data()};
    const int64_t n = 3;
    const std::vector<float> x = testing::RandomFloats(n * n_cols, 7);
    const std::vector<double> expected = ExactProduct(s.values, n_rows, n_cols, x, n);
    double scale = 0.0;  // sum |w| |x| of the largest row, the error's measure
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t r = 0; r < n_rows; ++r) {
        double sum = 0.0;
        for (int64_t k = 0; k < n_cols; ++k) {
          sum += std::fabs(double{s.values[r * n_cols + k]} * x[i * n_cols + k]);
        }
        scale = std::max(scale, sum);
      }
    }
    auto backend = CreateCpuBackend({.n_threads = 2});
    std::vector<float> as_stored;
    for (const bool registered : {false, true}) {
      SCOPED_TRACE(registered ? "registered" : "as stored");
      if (registered) {
        ASSERT_TRUE(backend->RegisterWeights(w));
      }
      std::vector<float> y(static_cast<size_t>(n * n_rows));
      backend->MatMul(w, x.data(), n, y.data());
      // 8-bit activations and the Q8_0 form: measured at most 0.15% of sum |w||x| (IQ3_XXS).
      for (size_t k = 0; k < y.size(); ++k) {
        ASSERT_NEAR(y[k], expected[k], 0.004 * scale) << "output " << k;
      }
      if (!registered) as_stored = y;
      for (size_t k = 0; k < y.size(); ++k) {
        ASSERT_EQ(Bits(y[k]), Bits(as_stored[k])) << "registration changed output " << k;
      }
      std::vector<float> rows(static_cast<size_t>(2 * n_cols));
      const int32_t ids[2] = {3, 1};
      backend->GetRows(w, ids, 2, rows.data());
      for (int64_t k = 0; k < n_cols; ++k) {
        ASSERT_EQ(Bits(rows[k]), Bits(s.values[3 * n_cols + k])) << k;
        ASSERT_EQ(Bits(rows[n_cols + k]), Bits(s.values[n_cols + k])) << k;
      }
    }
    backend->ReleaseWeights(w);
  }
}

// Registered, an i-quant multiplies as its Q8_0 form: the same bits as that Q8_0 matrix
// registered itself, in one MatMul and in a MatMulMany beside it.
TEST(IQuantBlocksTest, RegisteredMatMulIsItsQ8_0Forms) {
  for (const Sample& s : ReadSamples()) {
    SCOPED_TRACE(std::string(DTypeName(s.dtype)));
    std::vector<uint8_t> blocks = s.blocks;
    if (s.dtype == DType::kMXFP4) {
      for (size_t b = 0; b < blocks.size(); b += 17) blocks[b] = 120 + b % 20;  // in range
    }
    const int64_t n_rows = 4;  // a partial group of the packed layout's 16 rows
    const int64_t n_cols = s.n_values / n_rows;
    const WeightMatrix w{
        .dtype = s.dtype, .n_rows = n_rows, .n_cols = n_cols, .data = blocks.data()};
    std::vector<uint8_t> q8(static_cast<size_t>(n_rows * RowBytes(DType::kQ8_0, n_cols)));
    IQuantRowsToQ8_0(s.dtype, blocks.data(), n_rows, n_cols, q8.data());
    const WeightMatrix w8{
        .dtype = DType::kQ8_0, .n_rows = n_rows, .n_cols = n_cols, .data = q8.data()};
    auto backend = CreateCpuBackend({.n_threads = 2});
    ASSERT_TRUE(backend->RegisterWeights(w));
    ASSERT_TRUE(backend->RegisterWeights(w8));
    const int64_t n = 5;
    const std::vector<float> x = testing::RandomFloats(n * n_cols, 11);
    std::vector<float> y(static_cast<size_t>(n * n_rows)), y8(y.size()), y_many(y.size()),
        y8_many(y.size());
    backend->MatMul(w, x.data(), n, y.data());
    backend->MatMul(w8, x.data(), n, y8.data());
    const WeightMatrix* both[2] = {&w, &w8};
    float* outs[2] = {y_many.data(), y8_many.data()};
    backend->MatMulMany(both, x.data(), n, outs);
    for (size_t k = 0; k < y.size(); ++k) {
      ASSERT_EQ(Bits(y[k]), Bits(y8[k])) << k;
      ASSERT_EQ(Bits(y_many[k]), Bits(y8[k])) << k;
      ASSERT_EQ(Bits(y8_many[k]), Bits(y8[k])) << k;
    }
    backend->ReleaseWeights(w);
    backend->ReleaseWeights(w8);
  }
}

}  // namespace
}  // namespace baton::kernels
