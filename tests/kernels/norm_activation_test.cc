// RmsNorm and SiluMul of every CPU backend variant against double-precision formulas: aliasing
// (y == x, y == gate), NaN/Inf checks and canaries, extreme inputs, per-row batch invariance.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/backend.h"
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

INSTANTIATE_TEST_SUITE_P(All, NormActivationTest, ::testing::ValuesIn(testing::AllImpls()),
                         [](const auto& info) { return ImplName(info.param); });

}  // namespace
}  // namespace baton::kernels
