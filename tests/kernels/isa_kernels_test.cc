// Run-time ISA detection and the activation quantizers: the SIMD quantizers of each level agree
// bit for bit with the portable ones, and the quantized blocks satisfy their definition.
#include "kernels/cpu/isa_kernels.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/cpu_isa.h"
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

TEST(QuantizeTest, Q8_1MatchesScalarAndDefinition) {
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
  for (CpuIsa isa : {CpuIsa::kAvx2, CpuIsa::kAvx512Vnni, CpuIsa::kAmx}) {
    if (isa > DetectCpuIsaUncapped()) continue;
    std::vector<int8_t> q(kCols);
    std::vector<float> d(kCols / 32), s(kCols / 32);
    KernelsFor(isa).quantize_q8_1(x.data(), kCols, q.data(), d.data(), s.data());
    EXPECT_EQ(q, q_ref) << CpuIsaName(isa);
    EXPECT_EQ(0, std::memcmp(d.data(), d_ref.data(), d.size() * sizeof(float)));
    EXPECT_EQ(0, std::memcmp(s.data(), s_ref.data(), s.size() * sizeof(float)));
  }
}

TEST(QuantizeTest, Q8_KMatchesScalarAndDefinition) {
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
  for (CpuIsa isa : {CpuIsa::kAvx2, CpuIsa::kAvx512Vnni, CpuIsa::kAmx}) {
    if (isa > DetectCpuIsaUncapped()) continue;
    std::vector<int8_t> q(kCols);
    std::vector<float> d(kCols / 256);
    std::vector<int16_t> bsums(kCols / 16);
    KernelsFor(isa).quantize_q8_k(x.data(), kCols, q.data(), d.data(), bsums.data());
    EXPECT_EQ(q, q_ref) << CpuIsaName(isa);
    EXPECT_EQ(0, std::memcmp(d.data(), d_ref.data(), d.size() * sizeof(float)));
    EXPECT_EQ(bsums, bsums_ref);
  }
}

TEST(IsaKernelsTest, EveryLevelHasQuantizersAndTheFastLevelsHaveMatMuls) {
  for (CpuIsa isa : {CpuIsa::kScalar, CpuIsa::kAvx2, CpuIsa::kAvx512Vnni, CpuIsa::kAmx}) {
    if (isa > DetectCpuIsaUncapped()) continue;
    const IsaKernels& k = KernelsFor(isa);
    EXPECT_NE(k.quantize_q8_1, nullptr);
    EXPECT_NE(k.quantize_q8_k, nullptr);
    for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16, DType::kQ8_0, DType::kQ4_0,
                        DType::kQ4_1, DType::kQ5_0, DType::kQ5_1, DType::kQ2_K, DType::kQ3_K,
                        DType::kQ4_K, DType::kQ5_K, DType::kQ6_K}) {
      EXPECT_EQ(MatMulKernelFor(k, dtype) != nullptr, isa != CpuIsa::kScalar)
          << CpuIsaName(isa) << " " << DTypeName(dtype);
    }
  }
}

}  // namespace
}  // namespace baton::kernels
