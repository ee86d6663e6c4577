// Run-time ISA detection and the activation quantizers: the SIMD quantizers of each level agree
// bit for bit with the portable ones, and the quantized blocks satisfy their definition.
#include "kernels/cpu/isa_kernels.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <limits>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/cpu_isa.h"
#include "kernels/cpu/elementwise.h"
#include "tests/kernels/kernel_test_util.h"

namespace baton::kernels {
namespace {

TEST(CpuIsaTest, NamesRoundTrip) {
  for (CpuIsa isa : {CpuIsa::kScalar, CpuIsa::kAvx2, CpuIsa::kAvx512Vnni, CpuIsa::kAmx}) {
    EXPECT_EQ(ParseCpuIsa(CpuIsaName(isa)), isa);
  }
  EXPECT_EQ(ParseCpuIsa("sse9"), std::nullopt);
  EXPECT_LE(DetectCpuIsa(), DetectCpuIsaUncapped());
  EXPECT_EQ(CpuIsaName(), CpuIsaName(DetectCpuIsa()));
  EXPECT_EQ(KernelsFor(DetectCpuIsa()).isa, DetectCpuIsa());
}

// Rows with ordinary values, an all-zero block, tiny and huge values.
std::vector<float> TestRow(int64_t n, uint64_t seed) {
  std::vector<float> x = testing::RandomFloats(n, seed, 2.0f);
  for (int k = 32; k < 64 && k < n; ++k) x[k] = 0.0f;
  if (n > 100) x[100] = 1e30f;
  if (n > 300) x[300] = -1e-30f;
  if (n > 301) x[301] = 127.5f;
  return x;
}

// Each SIMD level's kernels against the portable ones, one test per level; a level this CPU
// lacks is a skipped test, saying so.
class SimdLevelTest : public ::testing::TestWithParam<CpuIsa> {};
class EveryLevelTest : public ::testing::TestWithParam<CpuIsa> {};

std::string LevelName(const ::testing::TestParamInfo<CpuIsa>& info) {
  return testing::IsaCaseName(info.param);
}

TEST_P(SimdLevelTest, QuantizesQ8_1AsScalarAndDefinition) {
  const CpuIsa isa = GetParam();
  if (const std::string why = testing::MissingIsa(isa); !why.empty()) GTEST_SKIP() << why;
  constexpr int64_t kCols = 1024;
  const std::vector<float> x = TestRow(kCols, 1);
  std::vector<int8_t> q_ref(kCols);
  std::vector<float> d_ref(kCols / 32), s_ref(kCols / 32);
  QuantizeRowQ8_1Scalar(x.data(), kCols, q_ref.data(), d_ref.data(), s_ref.data());
  for (int64_t b = 0; b < kCols / 32; ++b) {
    float amax = 0.0f;
    int32_t sum = 0;
    for (int k = 0; k < 32; ++k) {
      amax = std::fmax(amax, std::fabs(x[32 * b + k]));
      sum += q_ref[32 * b + k];
      if (d_ref[b] != 0.0f) {
        EXPECT_LE(std::fabs(x[32 * b + k] - q_ref[32 * b + k] * d_ref[b]), 0.5f * d_ref[b] * 1.0001f);
      }
    }
    EXPECT_EQ(d_ref[b], amax / 127.0f);
    EXPECT_EQ(s_ref[b], d_ref[b] * static_cast<float>(sum));
  }

  std::vector<int8_t> q(kCols);
  std::vector<float> d(kCols / 32), s(kCols / 32);
  KernelsFor(isa).quantize_q8_1(x.data(), kCols, q.data(), d.data(), s.data());
  EXPECT_EQ(q, q_ref) << CpuIsaName(isa);
  EXPECT_EQ(0, std::memcmp(d.data(), d_ref.data(), d.size() * sizeof(float)));
  EXPECT_EQ(0, std::memcmp(s.data(), s_ref.data(), s.size() * sizeof(float)));
}

TEST_P(SimdLevelTest, QuantizesQ8_KAsScalarAndDefinition) {
  const CpuIsa isa = GetParam();
  if (const std::string why = testing::MissingIsa(isa); !why.empty()) GTEST_SKIP() << why;
  constexpr int64_t kCols = 1024;
  const std::vector<float> x = TestRow(kCols, 2);
  std::vector<int8_t> q_ref(kCols);
  std::vector<float> d_ref(kCols / 256);
  std::vector<int16_t> bsums_ref(kCols / 16);
  QuantizeRowQ8_KScalar(x.data(), kCols, q_ref.data(), d_ref.data(), bsums_ref.data());
  for (int64_t g = 0; g < kCols / 16; ++g) {
    int32_t sum = 0;
    for (int k = 0; k < 16; ++k) sum += q_ref[16 * g + k];
    EXPECT_EQ(bsums_ref[g], sum);
  }

  std::vector<int8_t> q(kCols);
  std::vector<float> d(kCols / 256);
  std::vector<int16_t> bsums(kCols / 16);
  KernelsFor(isa).quantize_q8_k(x.data(), kCols, q.data(), d.data(), bsums.data());
  EXPECT_EQ(q, q_ref) << CpuIsaName(isa);
  EXPECT_EQ(0, std::memcmp(d.data(), d_ref.data(), d.size() * sizeof(float)));
  EXPECT_EQ(bsums, bsums_ref);
}

TEST_P(EveryLevelTest, HasQuantizersAndTheFastLevelsHaveMatMuls) {
  const CpuIsa isa = GetParam();
  if (const std::string why = testing::MissingIsa(isa); !why.empty()) GTEST_SKIP() << why;
  const IsaKernels& k = KernelsFor(isa);
  EXPECT_NE(k.quantize_q8_1, nullptr);
  EXPECT_NE(k.quantize_q8_k, nullptr);
  EXPECT_NE(k.add, nullptr);
  EXPECT_NE(k.round_to_f16_unbounded, nullptr);
  EXPECT_NE(k.rms_norm_row, nullptr);
  for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16, DType::kQ8_0, DType::kQ4_0,
                      DType::kQ4_1, DType::kQ5_0, DType::kQ5_1, DType::kQ2_K, DType::kQ3_K,
                      DType::kQ4_K, DType::kQ5_K, DType::kQ6_K}) {
    EXPECT_EQ(MatMulKernelFor(k, dtype) != nullptr, isa != CpuIsa::kScalar)
        << CpuIsaName(isa) << " " << DTypeName(dtype);
  }
}

// Lengths around the vector widths, and the default model's and larger rows.
constexpr int64_t kElementwiseLengths[] = {0, 1, 7, 8, 9, 15, 17, 576, 1001, 2048};

// TestRow's values (the element-wise tests' inputs), with f16's edges and non-finite values in
// the rows long enough to hold them.
std::vector<float> EdgeRow(int64_t n, uint64_t seed) {
  std::vector<float> x = TestRow(n, seed);
  const float edges[] = {65504.0f, 65520.0f, 1.0e6f, -3.0e7f, std::ldexp(1.0f, -20), -0.0f,
                         1.0f + std::ldexp(1.0f, -11), std::numeric_limits<float>::infinity(),
                         std::nanf(""), 3.4e38f};
  for (size_t k = 0; k < std::size(edges) && 400 + k < static_cast<size_t>(n); ++k) {
    x[400 + k] = edges[k];
  }
  return x;
}

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() &&
         (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

TEST_P(SimdLevelTest, AddsAndRoundsAsTheDefinition) {
  const CpuIsa isa = GetParam();
  if (const std::string why = testing::MissingIsa(isa); !why.empty()) GTEST_SKIP() << why;
  const IsaKernels& k = KernelsFor(isa);
  for (int64_t n : kElementwiseLengths) {
    const std::vector<float> x = EdgeRow(n, 3 + n);
    const std::vector<float> y = TestRow(n, 4 + n);
    std::vector<float> sum_ref = x, sum = x;
    AddScalar(sum_ref.data(), y.data(), n);
    k.add(sum.data(), y.data(), n);
    EXPECT_TRUE(SameBits(sum, sum_ref)) << CpuIsaName(isa) << " add, n " << n;
    std::vector<float> rounded_ref = x, rounded = x;
    RoundToF16UnboundedScalar(rounded_ref.data(), n);
    k.round_to_f16_unbounded(rounded.data(), n);
    EXPECT_TRUE(SameBits(rounded, rounded_ref)) << CpuIsaName(isa) << " round, n " << n;
  }
}

TEST_P(SimdLevelTest, NormalizesAsTheDefinition) {
  const CpuIsa isa = GetParam();
  if (const std::string why = testing::MissingIsa(isa); !why.empty()) GTEST_SKIP() << why;
  for (int64_t dim : kElementwiseLengths) {
    if (dim == 0) continue;
    // Ordinary rows, and rows with huge and non-finite values (whose scale is 0 or NaN).
    for (const std::vector<float>& x : {TestRow(dim, 5 + dim), EdgeRow(dim, 6 + dim)}) {
      const std::vector<float> weight = testing::RandomFloats(dim, 7, 1.5f);
      std::vector<float> y_ref(dim), y(dim);
      RmsNormRowScalar(x.data(), weight.data(), dim, 1e-5f, y_ref.data());
      KernelsFor(isa).rms_norm_row(x.data(), weight.data(), dim, 1e-5f, y.data());
      EXPECT_TRUE(SameBits(y, y_ref)) << CpuIsaName(isa) << " dim " << dim;
    }
  }
}

// The 8 lanes' sum is the sum of squares: near the formula in double.
TEST(ElementwiseTest, RmsNormRowIsTheFormula) {
  for (int64_t dim : {1, 9, 576, 2048}) {
    const std::vector<float> x = testing::RandomFloats(dim, 8 + dim, 3.0f);
    const std::vector<float> weight = testing::RandomFloats(dim, 9, 1.5f);
    std::vector<float> y(dim);
    RmsNormRowScalar(x.data(), weight.data(), dim, 1e-5f, y.data());
    double squares = 0.0;
    for (float v : x) squares += static_cast<double>(v) * v;
    const double inverse = 1.0 / std::sqrt(squares / dim + 1e-5);
    for (int64_t j = 0; j < dim; ++j) {
      const double want = x[j] * inverse * weight[j];
      ASSERT_NEAR(y[j], want, 1e-6 * (1.0 + std::fabs(want))) << "dim " << dim << " at " << j;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Levels, SimdLevelTest, ::testing::ValuesIn(testing::kSimdIsas), LevelName);
INSTANTIATE_TEST_SUITE_P(Levels, EveryLevelTest,
                         ::testing::Values(CpuIsa::kScalar, CpuIsa::kAvx2, CpuIsa::kAvx512Vnni,
                                           CpuIsa::kAmx),
                         LevelName);

}  // namespace
}  // namespace baton::kernels
