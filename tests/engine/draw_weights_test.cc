// DrawExp against std::exp over the range the sampler uses ((logit - max) / T <= 0), and its
// edges: 1 at 0, 0 below f32's normal range and at -inf; the vectorized FillDrawWeights against
// the scalar DrawWeight, bit for bit.
#include "engine/draw_weights.h"

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace baton::engine {
namespace {

TEST(DrawWeightsTest, IsWithinTwoTenMillionthsOfExp) {
  double worst = 0;
  float worst_x = 0;
  for (float x = -87.3f; x <= 0.0f; x += 0.000731f) {
    const double exact = std::exp(static_cast<double>(x));
    const double error = std::abs(DrawExp(x) - exact) / exact;
    if (error > worst) {
      worst = error;
      worst_x = x;
    }
  }
  EXPECT_LT(worst, 2e-7) << "at x = " << worst_x;
  for (const float x : {0.5f, 1.0f, 10.0f, 88.0f}) {
    EXPECT_NEAR(DrawExp(x) / std::exp(static_cast<double>(x)), 1.0, 2e-7) << x;
  }
}

TEST(DrawWeightsTest, EdgesOfTheRange) {
  EXPECT_EQ(DrawExp(0.0f), 1.0f);
  EXPECT_EQ(DrawExp(-87.34f), 0.0f);
  EXPECT_EQ(DrawExp(-1000.0f), 0.0f);
  EXPECT_EQ(DrawExp(-std::numeric_limits<float>::infinity()), 0.0f);
  EXPECT_GT(DrawExp(-87.33f), 0.0f);
  EXPECT_TRUE(std::isnormal(DrawExp(-87.33f)));
}

TEST(DrawWeightsTest, TheVectorizedWeightsAreTheScalarOnesBitForBit) {
  constexpr float kInf = std::numeric_limits<float>::infinity();
  std::vector<float> logits(49152 + 7);  // a tail past the last 16
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 8.0f);
  for (float& x : logits) x = normal(rng);
  logits[5] = std::nanf("");
  logits[6] = -kInf;
  logits[7] = kInf;
  logits[49155] = -kInf;
  for (const float inv_temperature : {1.0f, 1.0f / 0.7f, 0.1f, kInf}) {
    for (const float max : {std::numeric_limits<float>::max(), 40.0f}) {
      std::vector<float> weights(logits.size());
      FillDrawWeights(logits, max, inv_temperature, weights);
      for (size_t i = 0; i < logits.size(); ++i) {
        const float scalar = DrawWeight(SanitizeLogit(logits[i]), max, inv_temperature);
        ASSERT_EQ(std::bit_cast<uint32_t>(weights[i]), std::bit_cast<uint32_t>(scalar))
            << "logit " << i << " = " << logits[i] << ", 1/T " << inv_temperature;
      }
      EXPECT_EQ(weights[5], 0.0f);  // NaN: masked
      EXPECT_EQ(weights[6], 0.0f);
    }
  }
}

}  // namespace
}  // namespace baton::engine
