// DequantizeRow against blocks built by hand from GGML's block layouts, and the f16/bf16
// conversions against independent definitions. Expected values are computed here from the format
// definitions (never by calling the code under test); halves are written as literal bit patterns.
#include "kernels/cpu/dequantize.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/dtype.h"
#include "kernels/half.h"

namespace baton::kernels {
namespace {

// f16 bit patterns used below.
constexpr uint16_t kHalfOne = 0x3c00;         // 1.0
constexpr uint16_t kHalfHalf = 0x3800;        // 0.5
constexpr uint16_t kHalfQuarter = 0x3400;     // 0.25
constexpr uint16_t kHalfTwo = 0x4000;         // 2.0
constexpr uint16_t kHalfMinusOne = 0xbc00;    // -1.0
constexpr uint16_t kHalfOneAndHalf = 0x3e00;  // 1.5

uint32_t Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

float FromBits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// Little-endian byte builder for blocks.
class Bytes {
 public:
  Bytes& U8(uint8_t v) {
    b_.push_back(v);
    return *this;
  }
  Bytes& U16(uint16_t v) { return U8(v & 0xff).U8(v >> 8); }
  Bytes& U32(uint32_t v) { return U16(v & 0xffff).U16(v >> 16); }
  Bytes& F32(float f) { return U32(Bits(f)); }
  Bytes& Append(const std::vector<uint8_t>& v) {
    b_.insert(b_.end(), v.begin(), v.end());
    return *this;
  }
  const std::vector<uint8_t>& bytes() const { return b_; }
  size_t size() const { return b_.size(); }

 private:
  std::vector<uint8_t> b_;
};

constexpr float kCanary = -12345.678f;
constexpr int kPad = 8;

// Dequantizes and checks the canaries around the output are intact.
std::vector<float> Dequantize(DType dtype, const Bytes& src, int64_t n) {
  EXPECT_EQ(static_cast<int64_t>(src.size()), RowBytes(dtype, n)) << DTypeName(dtype);
  std::vector<float> out(n + 2 * kPad, kCanary);
  DequantizeRow(dtype, src.bytes().data(), out.data() + kPad, n);
  for (int i = 0; i < kPad; ++i) {
    EXPECT_EQ(Bits(out[i]), Bits(kCanary)) << "canary before output overwritten at " << i;
    EXPECT_EQ(Bits(out[kPad + n + i]), Bits(kCanary)) << "canary after output overwritten at " << i;
  }
  return std::vector<float>(out.begin() + kPad, out.begin() + kPad + n);
}

// Exact comparison: the reference is bit-exact with GGML, and every expected value below is
// exactly representable and computed with the same operation order.
void ExpectSame(const std::vector<float>& got, const std::vector<float>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(Bits(got[i]), Bits(want[i]))
        << "element " << i << ": got " << got[i] << ", want " << want[i];
  }
}

TEST(DequantizeTest, F32) {
  const std::vector<float> v = {1.5f, -0.0f, 3.25e-30f, std::numeric_limits<float>::infinity(),
                                -7.0f};
  Bytes b;
  for (float f : v) b.F32(f);
  ExpectSame(Dequantize(DType::kF32, b, 5), v);
}

TEST(DequantizeTest, F16) {
  Bytes b;
  b.U16(0x3c00).U16(0xc000).U16(0x0001).U16(0x7bff).U16(0x7c00).U16(0x8000).U16(0x3555).U16(0x03ff);
  // 0x3555: exponent 13, mantissa 0x155 -> 2^-2 * (1 + 341/1024) = 1365/4096.
  const std::vector<float> want = {1.0f,
                                   -2.0f,
                                   std::ldexp(1.0f, -24),
                                   65504.0f,
                                   std::numeric_limits<float>::infinity(),
                                   -0.0f,
                                   1365.0f / 4096.0f,
                                   1023.0f * std::ldexp(1.0f, -24)};
  const std::vector<float> got = Dequantize(DType::kF16, b, 8);
  EXPECT_EQ(got[6], 0.333251953125f);
  ExpectSame(got, want);
}

TEST(DequantizeTest, BF16) {
  Bytes b;
  b.U16(0x3f80).U16(0xc0a0).U16(0x7f80).U16(0x0001).U16(0x8000);
  const std::vector<float> want = {1.0f, -5.0f, std::numeric_limits<float>::infinity(),
                                   std::ldexp(1.0f, -133), -0.0f};
  ExpectSame(Dequantize(DType::kBF16, b, 5), want);
}

TEST(DequantizeTest, Q8_0) {
  // Two blocks: d = 0.5, then d = -1; q[j] = 8j - 128 then q[j] = 127 - j.
  Bytes b;
  std::vector<float> want;
  b.U16(kHalfHalf);
  for (int j = 0; j < 32; ++j) {
    b.U8(static_cast<uint8_t>(static_cast<int8_t>(8 * j - 128)));
    want.push_back((8 * j - 128) * 0.5f);
  }
  b.U16(kHalfMinusOne);
  for (int j = 0; j < 32; ++j) {
    b.U8(static_cast<uint8_t>(127 - j));
    want.push_back(-(127.0f - j));
  }
  const std::vector<float> got = Dequantize(DType::kQ8_0, b, 64);
  EXPECT_EQ(got[0], -64.0f);
  EXPECT_EQ(got[32], -127.0f);
  ExpectSame(got, want);
}

TEST(DequantizeTest, Q4_0) {
  // qs[j] holds element j in its low nibble and element j + 16 in its high nibble; value
  // (q - 8) * d.
  Bytes b;
  b.U16(kHalfHalf);
  for (int j = 0; j < 16; ++j) b.U8(static_cast<uint8_t>(j | ((15 - j) << 4)));
  b.U16(kHalfTwo);
  for (int j = 0; j < 16; ++j) b.U8(0x8f);  // low 15, high 8
  std::vector<float> want(64);
  for (int j = 0; j < 16; ++j) {
    want[j] = (j - 8) * 0.5f;
    want[j + 16] = (15 - j - 8) * 0.5f;
    want[32 + j] = (15 - 8) * 2.0f;
    want[48 + j] = 0.0f;
  }
  const std::vector<float> got = Dequantize(DType::kQ4_0, b, 64);
  EXPECT_EQ(got[0], -4.0f);   // (0 - 8) * 0.5
  EXPECT_EQ(got[16], 3.5f);   // (15 - 8) * 0.5
  EXPECT_EQ(got[32], 14.0f);  // (15 - 8) * 2
  ExpectSame(got, want);
}

TEST(DequantizeTest, Q4_1) {
  // Value q * d + m, d = 0.25, m = -1.
  Bytes b;
  b.U16(kHalfQuarter).U16(kHalfMinusOne);
  for (int j = 0; j < 16; ++j) b.U8(static_cast<uint8_t>(j | (((j + 5) % 16) << 4)));
  std::vector<float> want(32);
  for (int j = 0; j < 16; ++j) {
    want[j] = j * 0.25f - 1.0f;
    want[j + 16] = ((j + 5) % 16) * 0.25f - 1.0f;
  }
  const std::vector<float> got = Dequantize(DType::kQ4_1, b, 32);
  EXPECT_EQ(got[0], -1.0f);
  EXPECT_EQ(got[15], 2.75f);
  EXPECT_EQ(got[16], 0.25f);  // 5 * 0.25 - 1
  ExpectSame(got, want);
}

// The fifth bits of the Q5 tests: bit j of this u32 is the high bit of element j.
constexpr uint32_t kQh = 0xa5c3f00fu;

TEST(DequantizeTest, Q5_0) {
  // q = nibble | (bit j of qh) << 4; value (q - 16) * d, d = 1.5.
  Bytes b;
  b.U16(kHalfOneAndHalf).U32(kQh);
  for (int j = 0; j < 16; ++j)
    b.U8(static_cast<uint8_t>(((3 * j) & 15) | (((j * 7 + 2) & 15) << 4)));
  std::vector<float> want(32);
  for (int j = 0; j < 16; ++j) {
    const int lo = ((3 * j) & 15) + 16 * ((kQh >> j) & 1);
    const int hi = ((j * 7 + 2) & 15) + 16 * ((kQh >> (j + 16)) & 1);
    want[j] = (lo - 16) * 1.5f;
    want[j + 16] = (hi - 16) * 1.5f;
  }
  const std::vector<float> got = Dequantize(DType::kQ5_0, b, 32);
  EXPECT_EQ(got[0], 0.0f);   // nibble 0, bit 0 set: 16 - 16
  EXPECT_EQ(got[4], -6.0f);  // nibble 12, bit 4 clear: (12 - 16) * 1.5
  ExpectSame(got, want);
}

TEST(DequantizeTest, Q5_1) {
  // q as Q5_0; value q * d + m, d = 0.5, m = 2.
  Bytes b;
  b.U16(kHalfHalf).U16(kHalfTwo).U32(kQh);
  for (int j = 0; j < 16; ++j) b.U8(static_cast<uint8_t>((15 - j) | (j << 4)));
  std::vector<float> want(32);
  for (int j = 0; j < 16; ++j) {
    const int lo = (15 - j) + 16 * ((kQh >> j) & 1);
    const int hi = j + 16 * ((kQh >> (j + 16)) & 1);
    want[j] = lo * 0.5f + 2.0f;
    want[j + 16] = hi * 0.5f + 2.0f;
  }
  const std::vector<float> got = Dequantize(DType::kQ5_1, b, 32);
  EXPECT_EQ(got[0], 17.5f);  // (15 + 16) * 0.5 + 2
  EXPECT_EQ(got[4], 7.5f);   // 11 * 0.5 + 2 (bit 4 of qh clear)
  ExpectSame(got, want);
}

// Packs eight 6-bit scales and mins the way Q4_K/Q5_K store them (12 bytes): sub-blocks 0..3 in the
// low 6 bits of bytes 0..3 (scale) and 4..7 (min); sub-blocks 4..7 as nibbles of bytes 8..11 (scale
// low, min high) with their top 2 bits in the top 2 bits of bytes 0..3 (scale) and 4..7 (min).
std::vector<uint8_t> PackScaleMinK4(const int (&sc)[8], const int (&m)[8]) {
  std::vector<uint8_t> p(12, 0);
  for (int j = 0; j < 4; ++j) {
    p[j] = static_cast<uint8_t>(sc[j]);
    p[j + 4] = static_cast<uint8_t>(m[j]);
  }
  for (int j = 4; j < 8; ++j) {
    p[j + 4] = static_cast<uint8_t>((sc[j] & 15) | ((m[j] & 15) << 4));
    p[j - 4] |= static_cast<uint8_t>((sc[j] >> 4) << 6);
    p[j] |= static_cast<uint8_t>((m[j] >> 4) << 6);
  }
  return p;
}

constexpr int kScalesK[8] = {1, 2, 3, 63, 33, 47, 18, 50};
constexpr int kMinsK[8] = {0, 5, 63, 10, 17, 32, 7, 61};

TEST(DequantizeTest, Q4_K) {
  // Sub-block s (32 elements) holds element 32s + l in qs[32 * (s / 2) + l], the low nibble for
  // even s, the high nibble for odd s. Value (d * scale[s]) * q - (dmin * min[s]).
  const float d = 1.0f, dmin = 0.5f;
  std::vector<uint8_t> qs(128);
  for (int i = 0; i < 128; ++i) qs[i] = static_cast<uint8_t>(i * 37 + 11);
  Bytes b;
  b.U16(kHalfOne).U16(kHalfHalf).Append(PackScaleMinK4(kScalesK, kMinsK)).Append(qs);
  std::vector<float> want(256);
  for (int e = 0; e < 256; ++e) {
    const int s = e / 32, l = e % 32;
    const uint8_t byte = qs[32 * (s / 2) + l];
    const int q = s % 2 == 0 ? byte & 15 : byte >> 4;
    want[e] = (d * kScalesK[s]) * q - (dmin * kMinsK[s]);
  }
  const std::vector<float> got = Dequantize(DType::kQ4_K, b, 256);
  // Element 0: qs[0] = 11 -> low nibble 11; scale 1, min 0 -> 11.
  EXPECT_EQ(got[0], 11.0f);
  // Element 224 (sub-block 7, l = 0): qs[96] = (96*37+11) & 255 = 235 -> high nibble 14;
  // 50 * 14 - 0.5 * 61 = 669.5.
  EXPECT_EQ(got[224], 669.5f);
  ExpectSame(got, want);
}

TEST(DequantizeTest, Q5_K) {
  // As Q4_K with a fifth bit: bit s of qh[l] is the high bit of element 32s + l.
  const float d = 0.5f, dmin = 1.0f;
  std::vector<uint8_t> qs(128), qh(32);
  for (int i = 0; i < 128; ++i) qs[i] = static_cast<uint8_t>(i * 91 + 3);
  for (int l = 0; l < 32; ++l) qh[l] = static_cast<uint8_t>(l * 29 + 0x5a);
  Bytes b;
  b.U16(kHalfHalf).U16(kHalfOne).Append(PackScaleMinK4(kScalesK, kMinsK)).Append(qh).Append(qs);
  std::vector<float> want(256);
  for (int e = 0; e < 256; ++e) {
    const int s = e / 32, l = e % 32;
    const uint8_t byte = qs[32 * (s / 2) + l];
    const int q = (s % 2 == 0 ? byte & 15 : byte >> 4) + 16 * ((qh[l] >> s) & 1);
    want[e] = (d * kScalesK[s]) * q - (dmin * kMinsK[s]);
  }
  const std::vector<float> got = Dequantize(DType::kQ5_K, b, 256);
  // Element 0: qs[0] = 3, qh[0] = 0x5a (bit 0 clear) -> q 3; 0.5 * 1 * 3 - 0 = 1.5.
  EXPECT_EQ(got[0], 1.5f);
  // Element 32 (sub-block 1): high nibble of qs[0] = 0, bit 1 of 0x5a set -> q 16;
  // 0.5 * 2 * 16 - 5 = 11.
  EXPECT_EQ(got[32], 11.0f);
  ExpectSame(got, want);
}

TEST(DequantizeTest, Q6_K) {
  // 6-bit q per element; element 128h + 32s + l: low 4 bits in ql[64h + l] (s = 0, 2) or
  // ql[64h + 32 + l] (s = 1, 3), the low nibble for s < 2 and the high nibble otherwise; high 2
  // bits in bits 2s, 2s + 1 of qh[32h + l]. Value (d * scales[e / 16]) * (q - 32).
  const float d = 0.25f;
  const int8_t scales[16] = {1, -2, 3, -4, 5, -6, 7, -8, 127, -128, 0, 11, -13, 17, 19, -23};
  int q6[256];
  for (int e = 0; e < 256; ++e) q6[e] = (e * 13 + 5) % 64;
  std::vector<uint8_t> ql(128, 0), qh(64, 0);
  for (int e = 0; e < 256; ++e) {
    const int h = e / 128, s = (e % 128) / 32, l = e % 32;
    const int ql_index = 64 * h + (s % 2 == 1 ? 32 : 0) + l;
    ql[ql_index] |= static_cast<uint8_t>(s < 2 ? (q6[e] & 15) : (q6[e] & 15) << 4);
    qh[32 * h + l] |= static_cast<uint8_t>((q6[e] >> 4) << (2 * s));
  }
  Bytes b;
  b.Append(ql).Append(qh);
  for (int8_t s : scales) b.U8(static_cast<uint8_t>(s));
  b.U16(kHalfQuarter);
  std::vector<float> want(256);
  for (int e = 0; e < 256; ++e) want[e] = (d * scales[e / 16]) * (q6[e] - 32);
  const std::vector<float> got = Dequantize(DType::kQ6_K, b, 256);
  EXPECT_EQ(got[0], -6.75f);      // q 5: 0.25 * 1 * (5 - 32)
  EXPECT_EQ(got[128], -857.25f);  // q (128 * 13 + 5) % 64 = 5, scales[8] = 127: 31.75 * -27
  ExpectSame(got, want);
}

TEST(DequantizeTest, Q2_K) {
  // 16 sub-blocks of 16; scales[i]: low nibble scale, high nibble min. Element 128h + 32f + l
  // has its 2 bits at bits 2f, 2f + 1 of qs[32h + l]. Value (d * scale) * q - (dmin * min).
  const float d = 0.5f, dmin = 0.25f;
  std::vector<uint8_t> scales(16), qs(64, 0);
  for (int i = 0; i < 16; ++i)
    scales[i] = static_cast<uint8_t>(((i * 5 + 1) & 15) | (((i * 3) & 15) << 4));
  int q2[256];
  for (int e = 0; e < 256; ++e) {
    q2[e] = (e * 7 + e / 5) % 4;
    const int h = e / 128, f = (e % 128) / 32, l = e % 32;
    qs[32 * h + l] |= static_cast<uint8_t>(q2[e] << (2 * f));
  }
  Bytes b;
  b.Append(scales).Append(qs).U16(kHalfHalf).U16(kHalfQuarter);
  std::vector<float> want(256);
  for (int e = 0; e < 256; ++e) {
    const int sub = e / 16;
    want[e] = (d * (scales[sub] & 15)) * q2[e] - (dmin * (scales[sub] >> 4));
  }
  ExpectSame(Dequantize(DType::kQ2_K, b, 256), want);
}

TEST(DequantizeTest, Q3_K) {
  // 16 sub-blocks of 16 with 6-bit scales stored + 32: low 4 bits in the low (i < 8) or high
  // (i >= 8) nibble of byte i % 8, high 2 bits at bits 2 * (i / 4) of byte 8 + i % 4. q in
  // [-4, 3]: low 2 bits as Q2_K, and bit e / 32 of hmask[e % 32] set when q >= 0 (else q + 4 is
  // stored). Value (d * scale) * q.
  const float d = 2.0f;
  int scale[16];
  for (int i = 0; i < 16; ++i) scale[i] = (i * 11) % 64 - 32;
  std::vector<uint8_t> packed(12, 0), qs(64, 0), hmask(32, 0);
  for (int i = 0; i < 16; ++i) {
    const int stored = scale[i] + 32;
    packed[i % 8] |= static_cast<uint8_t>(i < 8 ? (stored & 15) : (stored & 15) << 4);
    packed[8 + i % 4] |= static_cast<uint8_t>((stored >> 4) << (2 * (i / 4)));
  }
  int q3[256];
  for (int e = 0; e < 256; ++e) {
    q3[e] = (e * 5 + e / 9) % 8 - 4;
    const int h = e / 128, f = (e % 128) / 32, l = e % 32;
    const int low = q3[e] >= 0 ? q3[e] : q3[e] + 4;
    qs[32 * h + l] |= static_cast<uint8_t>(low << (2 * f));
    if (q3[e] >= 0) hmask[e % 32] |= static_cast<uint8_t>(1 << (e / 32));
  }
  Bytes b;
  b.Append(hmask).Append(qs).Append(packed).U16(kHalfTwo);
  std::vector<float> want(256);
  for (int e = 0; e < 256; ++e) want[e] = (d * scale[e / 16]) * q3[e];
  ExpectSame(Dequantize(DType::kQ3_K, b, 256), want);
}

TEST(DequantizeTest, Q8_K) {
  Bytes b;
  b.F32(0.125f);
  std::vector<float> want(256);
  for (int j = 0; j < 256; ++j) {
    b.U8(static_cast<uint8_t>(static_cast<int8_t>(j - 128)));
    want[j] = 0.125f * (j - 128);
  }
  for (int i = 0; i < 16; ++i) b.U16(0);  // bsums, ignored
  ExpectSame(Dequantize(DType::kQ8_K, b, 256), want);
}

TEST(DequantizeTest, EmptyRow) {
  Bytes b;
  EXPECT_TRUE(Dequantize(DType::kQ4_K, b, 0).empty());
}

TEST(DequantizeTest, UnalignedSource) {
  // Blocks are packed back to back in files, so a row may start at any address.
  Bytes b;
  b.U8(0xee);  // shifts the block by one byte
  b.U16(kHalfTwo);
  for (int j = 0; j < 32; ++j) b.U8(static_cast<uint8_t>(j));
  std::vector<float> out(32);
  DequantizeRow(DType::kQ8_0, b.bytes().data() + 1, out.data(), 32);
  for (int j = 0; j < 32; ++j) EXPECT_EQ(out[j], 2.0f * j);
}

using DequantizeDeathTest = ::testing::Test;

TEST_F(DequantizeDeathTest, UnsupportedTypeIsProgrammerError) {
  float out[1];
  const uint8_t in[4] = {};
  EXPECT_DEATH(DequantizeRow(DType::kI32, in, out, 1), "not supported");
}

TEST_F(DequantizeDeathTest, PartialBlockIsProgrammerError) {
  std::vector<uint8_t> in(64);
  std::vector<float> out(64);
  EXPECT_DEATH(DequantizeRow(DType::kQ4_0, in.data(), out.data(), 31), "block size");
}

// ----------------------------------------------------------------------------------------------
// f16 / bf16 conversions.

// The value of an f16 bit pattern, from the IEEE 754 binary16 definition.
double HalfValue(uint16_t h) {
  const int sign = h >> 15, exponent = (h >> 10) & 31, mantissa = h & 1023;
  double v;
  if (exponent == 0) {
    v = std::ldexp(static_cast<double>(mantissa), -24);
  } else if (exponent == 31) {
    v = mantissa == 0 ? std::numeric_limits<double>::infinity()
                      : std::numeric_limits<double>::quiet_NaN();
  } else {
    v = std::ldexp(static_cast<double>(1024 + mantissa), exponent - 25);
  }
  return sign ? -v : v;
}

TEST(HalfTest, F16ToF32AllPatterns) {
  for (uint32_t h = 0; h <= 0xffff; ++h) {
    const float got = F16ToF32(static_cast<uint16_t>(h));
    const double want = HalfValue(static_cast<uint16_t>(h));
    if (std::isnan(want)) {
      ASSERT_TRUE(std::isnan(got)) << std::hex << h;
      // Quiet NaN, sign and payload kept.
      EXPECT_EQ(Bits(got), ((h & 0x8000u) << 16) | 0x7fc00000u | ((h & 0x3ffu) << 13))
          << std::hex << h;
    } else {
      ASSERT_EQ(Bits(got), Bits(static_cast<float>(want))) << std::hex << h;
      EXPECT_EQ(std::signbit(got), (h & 0x8000) != 0);
    }
  }
}

TEST(HalfTest, F32ToF16RoundTripsEveryHalf) {
  for (uint32_t h = 0; h <= 0xffff; ++h) {
    if (std::isnan(HalfValue(static_cast<uint16_t>(h)))) continue;
    const float f = static_cast<float>(HalfValue(static_cast<uint16_t>(h)));
    ASSERT_EQ(F32ToF16(f), h) << std::hex << h;
  }
}

TEST(HalfTest, F32ToF16RoundsToNearestEven) {
  // Between every pair of adjacent finite non-negative halves (subnormals included), the midpoint
  // goes to the even one and anything off the midpoint to the nearer one. Both signs.
  for (uint32_t a = 0; a < 0x7bff; ++a) {
    const uint16_t b = static_cast<uint16_t>(a + 1);
    const double mid = (HalfValue(static_cast<uint16_t>(a)) + HalfValue(b)) / 2;
    const float fmid = static_cast<float>(mid);
    ASSERT_EQ(static_cast<double>(fmid), mid);  // exact in f32
    const uint16_t even = (a & 1) == 0 ? static_cast<uint16_t>(a) : b;
    ASSERT_EQ(F32ToF16(fmid), even) << std::hex << a;
    ASSERT_EQ(F32ToF16(std::nextafter(fmid, 0.0f)), a) << std::hex << a;
    ASSERT_EQ(F32ToF16(std::nextafter(fmid, 1e9f)), b) << std::hex << a;
    ASSERT_EQ(F32ToF16(-fmid), even | 0x8000) << std::hex << a;
    ASSERT_EQ(F32ToF16(-std::nextafter(fmid, 1e9f)), b | 0x8000) << std::hex << a;
  }
}

TEST(HalfTest, F32ToF16EdgeCases) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(F32ToF16(0.0f), 0x0000);
  EXPECT_EQ(F32ToF16(-0.0f), 0x8000);
  EXPECT_EQ(F32ToF16(1.0f), 0x3c00);
  EXPECT_EQ(F32ToF16(-2.0f), 0xc000);
  EXPECT_EQ(F32ToF16(1.0f / 3.0f), 0x3555);
  EXPECT_EQ(F32ToF16(65504.0f), 0x7bff);   // largest finite
  EXPECT_EQ(F32ToF16(65519.99f), 0x7bff);  // below the midpoint to 65536
  EXPECT_EQ(F32ToF16(65520.0f), 0x7c00);   // the midpoint rounds to even: inf
  EXPECT_EQ(F32ToF16(1e10f), 0x7c00);
  EXPECT_EQ(F32ToF16(-1e10f), 0xfc00);
  EXPECT_EQ(F32ToF16(std::numeric_limits<float>::max()), 0x7c00);
  EXPECT_EQ(F32ToF16(inf), 0x7c00);
  EXPECT_EQ(F32ToF16(-inf), 0xfc00);
  // Subnormals: smallest is 2^-24; 2^-25 is the midpoint to 0 and rounds to even (0).
  EXPECT_EQ(F32ToF16(std::ldexp(1.0f, -24)), 0x0001);
  EXPECT_EQ(F32ToF16(std::ldexp(1.0f, -25)), 0x0000);
  EXPECT_EQ(F32ToF16(std::nextafter(std::ldexp(1.0f, -25), 1.0f)), 0x0001);
  EXPECT_EQ(F32ToF16(-std::ldexp(1.0f, -25)), 0x8000);
  EXPECT_EQ(F32ToF16(std::ldexp(3.0f, -25)), 0x0002);     // 1.5 units: tie to even 2
  EXPECT_EQ(F32ToF16(std::ldexp(1.0f, -14)), 0x0400);     // smallest normal
  EXPECT_EQ(F32ToF16(std::ldexp(1023.5f, -24)), 0x0400);  // rounds up into the normals
  EXPECT_EQ(F32ToF16(std::ldexp(1.0f, -30)), 0x0000);
  EXPECT_EQ(F32ToF16(std::numeric_limits<float>::denorm_min()), 0x0000);
  EXPECT_EQ(F32ToF16(-std::numeric_limits<float>::denorm_min()), 0x8000);
  // NaN: GGML's software conversion gives the canonical quiet NaN, sign kept.
  EXPECT_EQ(F32ToF16(std::numeric_limits<float>::quiet_NaN()), 0x7e00);
  EXPECT_EQ(F32ToF16(FromBits(0x7f800001u)), 0x7e00);  // signaling
  EXPECT_EQ(F32ToF16(FromBits(0xffc00000u)), 0xfe00);
  EXPECT_EQ(F32ToF16(FromBits(0x7fffffffu)), 0x7e00);
}

TEST(HalfTest, BF16ToF32) {
  EXPECT_EQ(BF16ToF32(0x3f80), 1.0f);
  EXPECT_EQ(BF16ToF32(0xc0a0), -5.0f);
  EXPECT_EQ(Bits(BF16ToF32(0x8000)), 0x80000000u);
  EXPECT_EQ(Bits(BF16ToF32(0x7fc1)), 0x7fc10000u);
}

TEST(HalfTest, F32ToBF16) {
  EXPECT_EQ(F32ToBF16(1.0f), 0x3f80);
  EXPECT_EQ(F32ToBF16(-5.0f), 0xc0a0);
  EXPECT_EQ(F32ToBF16(-0.0f), 0x8000);
  // Round to nearest even on the dropped 16 bits.
  EXPECT_EQ(F32ToBF16(FromBits(0x3f808000u)), 0x3f80);  // tie, even below
  EXPECT_EQ(F32ToBF16(FromBits(0x3f818000u)), 0x3f82);  // tie, odd below: up
  EXPECT_EQ(F32ToBF16(FromBits(0x3f808001u)), 0x3f81);  // above the tie
  EXPECT_EQ(F32ToBF16(FromBits(0x3f807fffu)), 0x3f80);  // below the tie
  EXPECT_EQ(F32ToBF16(FromBits(0xbf818000u)), 0xbf82);  // negative tie
  EXPECT_EQ(F32ToBF16(FromBits(0x3f80ffffu)), 0x3f81);
  EXPECT_EQ(F32ToBF16(FromBits(0x3fffffffu)), 0x4000);  // carries into the exponent
  // Overflow to inf; inf stays.
  EXPECT_EQ(F32ToBF16(std::numeric_limits<float>::max()), 0x7f80);
  EXPECT_EQ(F32ToBF16(FromBits(0x7f7f7fffu)), 0x7f7f);
  EXPECT_EQ(F32ToBF16(std::numeric_limits<float>::infinity()), 0x7f80);
  EXPECT_EQ(F32ToBF16(-std::numeric_limits<float>::infinity()), 0xff80);
  // Subnormals are rounded, not flushed.
  EXPECT_EQ(F32ToBF16(FromBits(0x00008000u)), 0x0000);
  EXPECT_EQ(F32ToBF16(FromBits(0x00018000u)), 0x0002);
  EXPECT_EQ(F32ToBF16(FromBits(0x00008001u)), 0x0001);
  EXPECT_EQ(F32ToBF16(FromBits(0x80010000u)), 0x8001);
  // NaN: top payload bits kept, quiet bit forced; never rounds into inf.
  EXPECT_EQ(F32ToBF16(FromBits(0x7fc00000u)), 0x7fc0);
  EXPECT_EQ(F32ToBF16(FromBits(0x7f800001u)), 0x7fc0);
  EXPECT_EQ(F32ToBF16(FromBits(0x7fa12345u)), 0x7fe1);
  EXPECT_EQ(F32ToBF16(FromBits(0xff80ffffu)), 0xffc0);
}

TEST(HalfTest, BF16RoundTripsEveryPattern) {
  for (uint32_t h = 0; h <= 0xffff; ++h) {
    const float f = BF16ToF32(static_cast<uint16_t>(h));
    const uint16_t back = F32ToBF16(f);
    if (std::isnan(f)) {
      EXPECT_EQ(back, h | 0x40) << std::hex << h;
    } else {
      ASSERT_EQ(back, h) << std::hex << h;
    }
  }
}

}  // namespace
}  // namespace baton::kernels
