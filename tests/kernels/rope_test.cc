// Rope of every CPU backend variant against values computed by hand (Python, double precision),
// normal and NeoX pairing, partial rotation (n_dims < head_dim), freq_scale and freq_factors;
// position 0 is the identity; tokens rotate independently of each other.
#include <algorithm>
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

using testing::Impl;
using testing::ImplName;
using testing::ImplSupported;
using testing::MakeBackend;

class RopeTest : public ::testing::TestWithParam<Impl> {
 protected:
  void SetUp() override {
    if (!ImplSupported(GetParam())) GTEST_SKIP() << ImplName(GetParam()) << " not supported";
    backend_ = MakeBackend(GetParam());
  }
  void ExpectNear(const std::vector<float>& got, const std::vector<float>& want) {
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 2e-6) << "element " << i;
  }
  std::unique_ptr<Backend> backend_;
};

// x = [1, 2, 3, 4] at position 3, base 10000: theta_0 = 3, theta_1 = 3 * 10000^(-1/2) = 0.03.
TEST_P(RopeTest, NormalPairsAdjacentDims) {
  std::vector<float> x = {1, 2, 3, 4};
  const int32_t pos = 3;
  backend_->Rope(x.data(), 1, 1, 4, &pos, {.n_dims = 4, .freq_base = 10000.0f});
  ExpectNear(x, {-1.2722325f, -1.8388650f, 2.8786681f, 4.0881866f});
}

TEST_P(RopeTest, NeoxPairsHalves) {
  std::vector<float> x = {1, 2, 3, 4};
  const int32_t pos = 3;
  backend_->Rope(x.data(), 1, 1, 4, &pos, {.n_dims = 4, .freq_base = 10000.0f, .neox = true});
  ExpectNear(x, {-1.4133525f, 1.8791181f, -2.8288575f, 4.0581911f});
}

// head_dim 6, n_dims 4, position 5, base 500, freq_scale 0.5, freq_factors [1, 4]:
// theta_0 = 2.5, theta_1 = 2.5 * 500^(-1/2) / 4; dims 4 and 5 stay. Two heads, same rotation.
TEST_P(RopeTest, PartialRotationWithScalingAndFactors) {
  const float factors[2] = {1.0f, 4.0f};
  const std::vector<float> head = {0.5f, -1, 2, 0.25f, 7, 8};
  for (bool neox : {false, true}) {
    std::vector<float> x = head;
    x.insert(x.end(), head.begin(), head.end());
    const int32_t pos = 5;
    backend_->Rope(x.data(), 1, 2, 6, &pos,
                   {.n_dims = 4, .freq_base = 500.0f, .freq_scale = 0.5f, .neox = neox,
                    .freq_factors = factors});
    const std::vector<float> want =
        neox ? std::vector<float>{-1.5975161f, -1.0065962f, -1.3030512f, 0.2219551f, 7, 8}
             : std::vector<float>{0.1979003f, 1.1003797f, 1.9922320f, 0.3057968f, 7, 8};
    ExpectNear(std::vector<float>(x.begin(), x.begin() + 6), want);
    ExpectNear(std::vector<float>(x.begin() + 6, x.end()), want);
  }
}

// YaRN as transformers computes it (_compute_yarn_parameters, in double): n_dims 16, base 1e4,
// factor 8 over an original context of 64. The ramp runs between pairs low = floor(corr(32)) = 0
// and high = ceil(corr(1)) = 3, corr(r) = n_dims ln(64 / (2 pi r)) / (2 ln base): pair 0 keeps
// its unscaled frequency, pairs 3.. are divided by 8, pairs 1 and 2 mix them; cos and sin are
// scaled by 0.1 ln 8 + 1.
TEST_P(RopeTest, YarnMixesScaledAndUnscaledFrequenciesByTheRamp) {
  constexpr int kDims = 16;
  constexpr double kBase = 10000.0, kFactor = 8.0, kOrig = 64.0;
  auto corr = [](double rotations) {
    return kDims * std::log(kOrig / (rotations * 2.0 * M_PI)) / (2.0 * std::log(kBase));
  };
  const double low = std::max(0.0, std::floor(corr(32.0)));
  const double high = std::min(kDims - 1.0, std::ceil(corr(1.0)));
  ASSERT_EQ(low, 0.0);
  ASSERT_EQ(high, 3.0);
  for (const int32_t pos : {1, 200}) {
    const std::vector<float> x0 = testing::RandomFloats(kDims, 3);
    std::vector<float> x = x0;
    backend_->Rope(x.data(), 1, 1, kDims, &pos,
                   {.n_dims = kDims, .freq_base = static_cast<float>(kBase),
                    .freq_scale = static_cast<float>(1.0 / kFactor), .ext_factor = 1.0f,
                    .n_ctx_orig = static_cast<int32_t>(kOrig)});
    const double mscale = 0.1 * std::log(kFactor) + 1.0;
    for (int i = 0; i < kDims / 2; ++i) {
      const double extrapolated = std::pow(kBase, -2.0 * i / kDims);
      const double ramp = std::clamp((i - low) / (high - low), 0.0, 1.0);
      const double keep = 1.0 - ramp;  // the share of the unscaled frequency
      const double theta = pos * (extrapolated / kFactor * (1.0 - keep) + extrapolated * keep);
      const double c = std::cos(theta) * mscale, s = std::sin(theta) * mscale;
      EXPECT_NEAR(x[2 * i], x0[2 * i] * c - x0[2 * i + 1] * s, 1e-4)
          << "pos " << pos << " pair " << i;
      EXPECT_NEAR(x[2 * i + 1], x0[2 * i] * s + x0[2 * i + 1] * c, 1e-4)
          << "pos " << pos << " pair " << i;
    }
  }
}

TEST_P(RopeTest, PositionZeroIsIdentity) {
  const std::vector<float> x0 = testing::RandomFloats(3 * 64, 1);
  std::vector<float> x = x0;
  const int32_t pos = 0;
  backend_->Rope(x.data(), 1, 3, 64, &pos, {.n_dims = 64, .freq_base = 10000.0f});
  EXPECT_EQ(x, x0);
}

TEST_P(RopeTest, TokensAreIndependentAndMatchReference) {
  // Many tokens (so the fast backend splits them over threads) at scattered positions; each
  // token's result equals rotating it alone, and the reference backend's result.
  constexpr int64_t kTokens = 300, kHeads = 9, kDim = 64;
  const std::vector<float> x0 = testing::RandomFloats(kTokens * kHeads * kDim, 2);
  std::vector<int32_t> positions(kTokens);
  for (int64_t t = 0; t < kTokens; ++t) positions[t] = static_cast<int32_t>((t * 7919) % 4096);
  const RopeParams params{.n_dims = 64, .freq_base = 100000.0f};
  std::vector<float> x = x0, ref = x0;
  backend_->Rope(x.data(), kTokens, kHeads, kDim, positions.data(), params);
  MakeBackend(Impl::kReference)->Rope(ref.data(), kTokens, kHeads, kDim, positions.data(), params);
  EXPECT_EQ(x, ref);
  EXPECT_TRUE(testing::AllFinite(x.data(), x.size()));
  for (int64_t t : {0, 151, 299}) {
    std::vector<float> one(x0.begin() + t * kHeads * kDim, x0.begin() + (t + 1) * kHeads * kDim);
    backend_->Rope(one.data(), 1, kHeads, kDim, &positions[t], params);
    EXPECT_EQ(0, std::memcmp(one.data(), x.data() + t * kHeads * kDim, one.size() * sizeof(float)));
  }
}

// One backend rotating changing inputs in turn (the fast one keeps the angles of the last
// positions): every call equals the reference's rotation of that call alone.
TEST_P(RopeTest, EveryCallOfASequenceOfCallsMatchesReference) {
  constexpr int64_t kHeads = 3, kDim = 64;
  std::vector<float> factors = testing::RandomFloats(16, 5, 0.5f);
  for (float& f : factors) f += 1.0f;
  const RopeParams plain{.n_dims = 64, .freq_base = 10000.0f};
  const RopeParams scaled{.n_dims = 32, .freq_base = 10000.0f, .freq_scale = 0.25f,
                          .freq_factors = factors.data()};
  const RopeParams yarn{.n_dims = 64, .freq_base = 10000.0f, .freq_scale = 0.25f,
                        .ext_factor = 1.0f, .n_ctx_orig = 64};
  RopeParams yarn_beta = yarn;
  yarn_beta.beta_fast = 8.0f;
  struct Call {
    std::vector<int32_t> positions;
    RopeParams params;
  };
  const std::vector<Call> calls = {
      {{5, 6, 7}, plain},        {{5, 6, 7}, plain},   // the same positions twice (Q, then K)
      {{5, 6, 8}, plain},        {{5, 6}, plain},      // one position changed; one fewer
      {{5, 6}, {.n_dims = 64, .freq_base = 500.0f}},  // another base
      {{5, 6}, scaled},          {{5, 6}, scaled},     // frequency factors
      {{5, 6}, yarn},            {{5, 6}, yarn_beta},  // YaRN, then other ramp ends
  };
  auto reference = MakeBackend(Impl::kReference);
  for (size_t c = 0; c < calls.size(); ++c) {
    if (c == 6) factors[3] += 1.0f;  // the same factor array with a changed value
    const int64_t n = static_cast<int64_t>(calls[c].positions.size());
    const std::vector<float> x0 = testing::RandomFloats(n * kHeads * kDim, 10 + c);
    std::vector<float> x = x0, want = x0;
    backend_->Rope(x.data(), n, kHeads, kDim, calls[c].positions.data(), calls[c].params);
    reference->Rope(want.data(), n, kHeads, kDim, calls[c].positions.data(), calls[c].params);
    EXPECT_EQ(x, want) << "call " << c;
  }
}

INSTANTIATE_TEST_SUITE_P(All, RopeTest, ::testing::ValuesIn(testing::AllImpls()),
                         [](const auto& info) { return ImplName(info.param); });

}  // namespace
}  // namespace baton::kernels
