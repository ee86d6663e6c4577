// RmsNorm, SiluMul, GeluMul and Scale of every CPU backend variant against double-precision formulas: aliasing
// (y == x, y == gate), NaN/Inf checks and canaries, extreme inputs, per-row batch invariance.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/backend.h"
#include "kernels/half.h"
#include "tests/kernels/backend_params.h"
#include "tests/kernels/kernel_test_util.h"

namespace baton::kernels {
namespace {

using testing::GuardedBuffer;
using testing::Impl;
using testing::ImplName;
using testing::ImplSupported;
using testing::MakeBackend;
using testing::RandomFloats;

class NormActivationTest : public ::testing::TestWithParam<Impl> {
 protected:
  void SetUp() override {
    if (!ImplSupported(GetParam())) GTEST_SKIP() << ImplName(GetParam()) << " not supported";
    backend_ = MakeBackend(GetParam());
  }
  std::unique_ptr<Backend> backend_;
};

TEST_P(NormActivationTest, RmsNormMatchesFormula) {
  for (int64_t dim : {1, 7, 576, 2048}) {
    for (int64_t n : {1, 3, 64}) {
      const std::vector<float> x = RandomFloats(n * dim, 1 + dim, 3.0f);
      const std::vector<float> weight = RandomFloats(dim, 2);
      const float eps = 1e-5f;
      GuardedBuffer y(n * dim, NAN);
      backend_->RmsNorm(x.data(), weight.data(), n, dim, eps, y.data());
      EXPECT_TRUE(y.CanariesIntact());
      ASSERT_TRUE(testing::AllFinite(y.data(), n * dim));
      for (int64_t i = 0; i < n; ++i) {
        double ss = 0.0;
        for (int64_t j = 0; j < dim; ++j) ss += static_cast<double>(x[i * dim + j]) * x[i * dim + j];
        const double inv = 1.0 / std::sqrt(ss / dim + eps);
        for (int64_t j = 0; j < dim; ++j) {
          const double want = x[i * dim + j] * inv * weight[j];
          ASSERT_NEAR(y[i * dim + j], want, 1e-5 * (1.0 + std::fabs(want)))
              << "dim " << dim << " row " << i << " col " << j;
        }
      }
      // In place gives the same bits.
      std::vector<float> inplace = x;
      backend_->RmsNorm(inplace.data(), weight.data(), n, dim, eps, inplace.data());
      EXPECT_EQ(0, std::memcmp(inplace.data(), y.data(), n * dim * sizeof(float)));
    }
  }
}

TEST_P(NormActivationTest, RmsNormOfZerosIsZero) {
  std::vector<float> x(2 * 64, 0.0f), w(64, 1.0f), y(2 * 64, NAN);
  backend_->RmsNorm(x.data(), w.data(), 2, 64, 1e-6f, y.data());
  for (float v : y) EXPECT_EQ(v, 0.0f);
}

TEST_P(NormActivationTest, SiluMulMatchesFormula) {
  for (int64_t count : {1, 7, 8, 9, 1536, 100003}) {
    std::vector<float> gate = RandomFloats(count, 3 + count, 4.0f);
    const std::vector<float> up = RandomFloats(count, 4);
    // Extremes: exp(-g) under- and overflows.
    const float extremes[] = {-100.0f, 100.0f, -88.5f, 88.5f, 0.0f, -1e-30f, 30.0f, -30.0f};
    for (int k = 0; k < 8 && k < count; ++k) gate[k * (count / 8 + 1) % count] = extremes[k];
    GuardedBuffer y(count, NAN);
    backend_->SiluMul(gate.data(), up.data(), count, y.data());
    EXPECT_TRUE(y.CanariesIntact());
    ASSERT_TRUE(testing::AllFinite(y.data(), count));
    for (int64_t i = 0; i < count; ++i) {
      const double g = gate[i];
      const double want = g / (1.0 + std::exp(-g)) * up[i];
      ASSERT_NEAR(y[i], want, 1e-6 * (1.0 + std::fabs(want))) << "count " << count << " i " << i
                                                                << " gate " << g;
    }
    std::vector<float> inplace = gate;
    backend_->SiluMul(inplace.data(), up.data(), count, inplace.data());
    EXPECT_EQ(0, std::memcmp(inplace.data(), y.data(), count * sizeof(float)));
    // An element's result does not depend on where it sits (vector body or tail).
    if (count > 9) {
      float one;
      backend_->SiluMul(&gate[count - 1], &up[count - 1], 1, &one);
      EXPECT_EQ(0, std::memcmp(&one, y.data() + count - 1, sizeof one));
      backend_->SiluMul(&gate[3], &up[3], 1, &one);
      EXPECT_EQ(0, std::memcmp(&one, y.data() + 3, sizeof one));
    }
  }
}

// GELU's tanh approximation in double of gate rounded to f16, the result within f16's rounding
// (GGML's table holds f16 values); exactly 0 at or below -10 and the gate itself at or above 10.
TEST_P(NormActivationTest, GeluMulMatchesGgmlsF16Gelu) {
  for (int64_t count : {1, 9, 2048, 100003}) {
    std::vector<float> gate = RandomFloats(count, 5 + count, 4.0f);
    const std::vector<float> up = RandomFloats(count, 6);
    const float extremes[] = {-10.0f, 10.0f, -10.5f, 12.0f, 0.0f, -9.99f, 9.99f, 1e-8f};
    for (int k = 0; k < 8 && k < count; ++k) gate[k * (count / 8 + 1) % count] = extremes[k];
    GuardedBuffer y(count, NAN);
    backend_->GeluMul(gate.data(), up.data(), count, y.data());
    EXPECT_TRUE(y.CanariesIntact());
    ASSERT_TRUE(testing::AllFinite(y.data(), count));
    for (int64_t i = 0; i < count; ++i) {
      const float g = gate[i];
      if (g <= -10.0f) {
        ASSERT_EQ(y[i], 0.0f) << "gate " << g;
        continue;
      }
      if (g >= 10.0f) {
        ASSERT_EQ(y[i], g * up[i]) << "gate " << g;
        continue;
      }
      const double x = F16ToF32(F32ToF16(g));
      const double gelu = 0.5 * x * (1.0 + std::tanh(0.7978845608028654 * x * (1.0 + 0.044715 * x * x)));
      const double want = gelu * up[i];
      // One f16 rounding of gelu: a relative 2^-11, plus the absolute spacing of f16 near zero;
      // and GGML's f32 1 + tanh(...), which loses the low bits of tanh near -1: two f32 steps
      // of 1, times x / 2.
      const double f32_error = 0.5 * std::fabs(x) * 2.4e-7;
      ASSERT_NEAR(y[i], want,
                  (std::fabs(gelu) * 4.9e-4 + 6e-8 + f32_error) * std::fabs(up[i]) + 1e-7)
          << "count " << count << " i " << i << " gate " << g;
    }
    std::vector<float> inplace = gate;
    backend_->GeluMul(inplace.data(), up.data(), count, inplace.data());
    EXPECT_EQ(0, std::memcmp(inplace.data(), y.data(), count * sizeof(float)));
    if (count > 9) {
      float one;
      backend_->GeluMul(&gate[count - 1], &up[count - 1], 1, &one);
      EXPECT_EQ(0, std::memcmp(&one, y.data() + count - 1, sizeof one));
    }
  }
}

// Each output row the weighted sum of its chosen rows, the products rounded and added in slot
// order, whatever the other rows are.
TEST_P(NormActivationTest, WeightedSumOfRowsAddsTheWeightedRowsInSlotOrder) {
  const int64_t dim = 37, k = 3, n = 4;
  const std::vector<float> x = RandomFloats(10 * dim, 8, 2.0f);
  const std::vector<int64_t> rows = {9, 0, 4, 1, 1, 2, 7, 3, 5, 8, 6, 0};
  const std::vector<float> weights = RandomFloats(n * k, 9);
  GuardedBuffer out(n * dim, NAN);
  backend_->WeightedSumOfRows(x.data(), rows.data(), weights.data(), n, k, dim, out.data());
  EXPECT_TRUE(out.CanariesIntact());
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t e = 0; e < dim; ++e) {
      float want = weights[i * k] * x[rows[i * k] * dim + e];
      for (int64_t j = 1; j < k; ++j) {
        const float product = weights[i * k + j] * x[rows[i * k + j] * dim + e];
        want = want + product;
      }
      ASSERT_EQ(out[i * dim + e], want) << "row " << i << " element " << e;
    }
  }
  float one[dim];
  backend_->WeightedSumOfRows(x.data(), rows.data() + 2 * k, weights.data() + 2 * k, 1, k, dim,
                              one);
  EXPECT_EQ(0, std::memcmp(one, out.data() + 2 * dim, sizeof one));
}

TEST_P(NormActivationTest, ScaleMultipliesEveryElement) {
  const std::vector<float> x = RandomFloats(1001, 7, 3.0f);
  std::vector<float> y = x;
  backend_->Scale(y.data(), 25.298221f, static_cast<int64_t>(y.size()));
  for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(y[i], x[i] * 25.298221f) << "at " << i;
}

INSTANTIATE_TEST_SUITE_P(All, NormActivationTest, ::testing::ValuesIn(testing::AllImpls()),
                         [](const auto& info) { return ImplName(info.param); });

}  // namespace
}  // namespace baton::kernels
