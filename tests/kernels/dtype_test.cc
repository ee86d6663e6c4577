#include "kernels/dtype.h"

#include <cstdint>
#include <optional>
#include <set>
#include <string>

#include "gtest/gtest.h"
#include "kernels/cpu/dequantize.h"

namespace baton::kernels {
namespace {

struct Expected {
  DType dtype;
  uint32_t id;
  const char* name;
  int32_t block_size;
  int32_t block_bytes;
  bool can_dequantize;
};

// From GGML's ggml.h (type ids) and ggml-common.h (block structs).
constexpr Expected kExpected[] = {
    {DType::kF32, 0, "f32", 1, 4, true},
    {DType::kF16, 1, "f16", 1, 2, true},
    {DType::kQ4_0, 2, "q4_0", 32, 2 + 16, true},
    {DType::kQ4_1, 3, "q4_1", 32, 2 + 2 + 16, true},
    {DType::kQ5_0, 6, "q5_0", 32, 2 + 4 + 16, true},
    {DType::kQ5_1, 7, "q5_1", 32, 2 + 2 + 4 + 16, true},
    {DType::kQ8_0, 8, "q8_0", 32, 2 + 32, true},
    {DType::kQ8_1, 9, "q8_1", 32, 2 + 2 + 32, false},
    {DType::kQ2_K, 10, "q2_K", 256, 16 + 64 + 2 + 2, true},
    {DType::kQ3_K, 11, "q3_K", 256, 32 + 64 + 12 + 2, true},
    {DType::kQ4_K, 12, "q4_K", 256, 2 + 2 + 12 + 128, true},
    {DType::kQ5_K, 13, "q5_K", 256, 2 + 2 + 12 + 32 + 128, true},
    {DType::kQ6_K, 14, "q6_K", 256, 128 + 64 + 16 + 2, true},
    {DType::kQ8_K, 15, "q8_K", 256, 4 + 256 + 2 * 16, true},
    {DType::kIQ2_XXS, 16, "iq2_xxs", 256, 2 + 2 * 32, true},
    {DType::kIQ2_XS, 17, "iq2_xs", 256, 2 + 2 * 32 + 8, true},
    {DType::kIQ3_XXS, 18, "iq3_xxs", 256, 2 + 3 * 32, true},
    {DType::kIQ1_S, 19, "iq1_s", 256, 2 + 32 + 16, true},
    {DType::kIQ4_NL, 20, "iq4_nl", 32, 2 + 16, true},
    {DType::kIQ3_S, 21, "iq3_s", 256, 2 + 13 * 8 + 4, true},
    {DType::kIQ2_S, 22, "iq2_s", 256, 2 + 64 + 16, true},
    {DType::kIQ4_XS, 23, "iq4_xs", 256, 2 + 2 + 4 + 128, true},
    {DType::kI8, 24, "i8", 1, 1, false},
    {DType::kI16, 25, "i16", 1, 2, false},
    {DType::kI32, 26, "i32", 1, 4, false},
    {DType::kI64, 27, "i64", 1, 8, false},
    {DType::kF64, 28, "f64", 1, 8, false},
    {DType::kIQ1_M, 29, "iq1_m", 256, 32 + 16 + 8, true},
    {DType::kBF16, 30, "bf16", 1, 2, true},
    {DType::kMXFP4, 39, "mxfp4", 32, 1 + 16, true},
};

TEST(DTypeTest, TraitsMatchGgml) {
  for (const Expected& e : kExpected) {
    SCOPED_TRACE(e.name);
    EXPECT_EQ(static_cast<uint32_t>(e.dtype), e.id);
    const DTypeTraits& t = Traits(e.dtype);
    EXPECT_EQ(t.dtype, e.dtype);
    EXPECT_EQ(t.name, e.name);
    EXPECT_EQ(t.block_size, e.block_size);
    EXPECT_EQ(t.block_bytes, e.block_bytes);
    EXPECT_EQ(t.can_dequantize, e.can_dequantize);
    EXPECT_EQ(DTypeName(e.dtype), e.name);
  }
}

TEST(DTypeTest, LookupKnownIds) {
  for (const Expected& e : kExpected) {
    SCOPED_TRACE(e.name);
    const std::optional<DTypeTraits> t = LookupDType(e.id);
    ASSERT_TRUE(t.has_value());
    EXPECT_EQ(t->dtype, e.dtype);
    EXPECT_EQ(t->name, e.name);
    EXPECT_EQ(t->block_bytes, e.block_bytes);
  }
}

TEST(DTypeTest, LookupUnknownIds) {
  std::set<uint32_t> known;
  for (const Expected& e : kExpected) known.insert(e.id);
  for (uint32_t id = 0; id < 64; ++id) {
    if (known.count(id) == 0) {
      EXPECT_FALSE(LookupDType(id).has_value()) << id;
    }
  }
  // Removed GGML types (Q4_2, Q4_3) and negative ids seen as unsigned.
  EXPECT_FALSE(LookupDType(4).has_value());
  EXPECT_FALSE(LookupDType(5).has_value());
  EXPECT_FALSE(LookupDType(static_cast<uint32_t>(-1)).has_value());
  EXPECT_FALSE(LookupDType(0x80000000u).has_value());
}

TEST(DTypeTest, NamesAreUnique) {
  std::set<std::string> names;
  for (const Expected& e : kExpected) EXPECT_TRUE(names.insert(Traits(e.dtype).name.data()).second);
}

TEST(DTypeTest, RowBytes) {
  EXPECT_EQ(RowBytes(DType::kF32, 0), 0);
  EXPECT_EQ(RowBytes(DType::kF32, 7), 28);
  EXPECT_EQ(RowBytes(DType::kF16, 7), 14);
  EXPECT_EQ(RowBytes(DType::kBF16, 3), 6);
  EXPECT_EQ(RowBytes(DType::kQ4_0, 64), 36);
  EXPECT_EQ(RowBytes(DType::kQ4_1, 576), 18 * 20);
  EXPECT_EQ(RowBytes(DType::kQ8_0, 576), 18 * 34);
  EXPECT_EQ(RowBytes(DType::kQ4_K, 4096), 16 * 144);
  EXPECT_EQ(RowBytes(DType::kQ6_K, 512), 2 * 210);
}

using DTypeDeathTest = ::testing::Test;

TEST_F(DTypeDeathTest, TraitsOfUnknownIdIsProgrammerError) {
  EXPECT_DEATH(Traits(static_cast<DType>(4)), "unknown DType");
}

TEST_F(DTypeDeathTest, RowBytesNotMultipleOfBlockIsProgrammerError) {
  EXPECT_DEATH(RowBytes(DType::kQ4_0, 33), "block size");
}

}  // namespace
}  // namespace baton::kernels
