#include "kvtransfer/kv_dtype.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/half.h"

namespace baton::kvtransfer {
namespace {

std::vector<float> Values() {
  const float inf = std::numeric_limits<float>::infinity();
  return {0.0f,     -0.0f,   1.0f,     -2.5f,       3.14159f, 1e-3f, 6.1e-5f /* f16 subnormal */,
          1e-8f,    65504.0f, 65520.0f /* rounds past f16's max */, 1e6f, -1e6f, inf, -inf,
          std::numeric_limits<float>::quiet_NaN(), 0.333333f, 1234.5678f};
}

template <typename T>
std::vector<uint8_t> Bytes(const std::vector<T>& values) {
  std::vector<uint8_t> out(values.size() * sizeof(T));
  std::memcpy(out.data(), values.data(), out.size());
  return out;
}

std::vector<uint16_t> Halves(const std::vector<uint8_t>& bytes) {
  std::vector<uint16_t> out(bytes.size() / 2);
  std::memcpy(out.data(), bytes.data(), bytes.size());
  return out;
}

TEST(KvDtypeTest, NamesRoundTripAndSizes) {
  for (KvDtype d : {KvDtype::kF16, KvDtype::kBF16, KvDtype::kF32}) {
    EXPECT_EQ(ParseKvDtype(KvDtypeName(d)), d);
  }
  EXPECT_EQ(KvDtypeName(KvDtype::kBF16), "bf16");
  EXPECT_EQ(ParseKvDtype("fp16"), std::nullopt);
  EXPECT_EQ(ParseKvDtype(""), std::nullopt);
  EXPECT_EQ(KvDtypeBytes(KvDtype::kF16), 2);
  EXPECT_EQ(KvDtypeBytes(KvDtype::kBF16), 2);
  EXPECT_EQ(KvDtypeBytes(KvDtype::kF32), 4);
}

TEST(KvDtypeTest, F32ToF16RoundsOnceToNearestEven) {
  const std::vector<float> values = Values();
  std::vector<uint8_t> out(values.size() * 2);
  ConvertKv(KvDtype::kF32, Bytes(values).data(), KvDtype::kF16, out.data(),
            static_cast<int64_t>(values.size()));
  const std::vector<uint16_t> got = Halves(out);
  for (size_t i = 0; i < values.size(); ++i) {
    if (std::isnan(values[i])) {
      EXPECT_TRUE(std::isnan(kernels::F16ToF32(got[i])));
    } else {
      EXPECT_EQ(got[i], kernels::F32ToF16(values[i])) << values[i];
    }
  }
  EXPECT_TRUE(std::isinf(kernels::F16ToF32(got[9])));   // 65520: past f16's largest finite value
  EXPECT_TRUE(std::isinf(kernels::F16ToF32(got[10])));  // 1e6
}

TEST(KvDtypeTest, Bf16ToF16GoesThroughTheExactF32Value) {
  std::vector<uint16_t> bf16;
  for (float v : Values()) bf16.push_back(kernels::F32ToBF16(v));
  std::vector<uint8_t> out(bf16.size() * 2);
  ConvertKv(KvDtype::kBF16, Bytes(bf16).data(), KvDtype::kF16, out.data(),
            static_cast<int64_t>(bf16.size()));
  const std::vector<uint16_t> got = Halves(out);
  for (size_t i = 0; i < bf16.size(); ++i) {
    const float exact = kernels::BF16ToF32(bf16[i]);
    if (std::isnan(exact)) {
      EXPECT_TRUE(std::isnan(kernels::F16ToF32(got[i])));
    } else {
      EXPECT_EQ(got[i], kernels::F32ToF16(exact)) << exact;
    }
  }
}

TEST(KvDtypeTest, F16WidensExactlyAndTheSameTypeIsACopy) {
  std::vector<uint16_t> f16;
  for (float v : Values()) f16.push_back(kernels::F32ToF16(v));
  std::vector<uint8_t> wide(f16.size() * 4);
  ConvertKv(KvDtype::kF16, Bytes(f16).data(), KvDtype::kF32, wide.data(),
            static_cast<int64_t>(f16.size()));
  std::vector<uint8_t> back(f16.size() * 2);
  ConvertKv(KvDtype::kF32, wide.data(), KvDtype::kF16, back.data(),
            static_cast<int64_t>(f16.size()));
  EXPECT_EQ(Halves(back), f16);  // f16 -> f32 -> f16 loses nothing
  std::vector<uint8_t> copy(f16.size() * 2);
  ConvertKv(KvDtype::kF16, Bytes(f16).data(), KvDtype::kF16, copy.data(),
            static_cast<int64_t>(f16.size()));
  EXPECT_EQ(copy, Bytes(f16));
}

}  // namespace
}  // namespace baton::kvtransfer
