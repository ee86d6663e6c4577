#include "kernels/dtype.h"

#include <array>

#include "absl/log/check.h"

namespace baton::kernels {
namespace {

// Sizes follow GGML's block layouts (ggml-common.h); 256 is QK_K, the K-quant super-block.
constexpr std::array<DTypeTraits, 30> kTraits = {{
    {DType::kF32, "f32", 1, 4, true},       {DType::kF16, "f16", 1, 2, true},
    {DType::kQ4_0, "q4_0", 32, 18, true},    // f16 d; u8 qs[16]
    {DType::kQ4_1, "q4_1", 32, 20, true},    // f16 d, m; u8 qs[16]
    {DType::kQ5_0, "q5_0", 32, 22, true},    // f16 d; u8 qh[4]; u8 qs[16]
    {DType::kQ5_1, "q5_1", 32, 24, true},    // f16 d, m; u8 qh[4]; u8 qs[16]
    {DType::kQ8_0, "q8_0", 32, 34, true},    // f16 d; i8 qs[32]
    {DType::kQ8_1, "q8_1", 32, 36, false},   // f16 d, s; i8 qs[32]
    {DType::kQ2_K, "q2_K", 256, 84, true},   // u8 scales[16]; u8 qs[64]; f16 d, dmin
    {DType::kQ3_K, "q3_K", 256, 110, true},  // u8 hmask[32]; u8 qs[64]; u8 scales[12]; f16 d
    {DType::kQ4_K, "q4_K", 256, 144, true},  // f16 d, dmin; u8 scales[12]; u8 qs[128]
    {DType::kQ5_K, "q5_K", 256, 176, true},  // f16 d, dmin; u8 scales[12]; u8 qh[32]; u8 qs[128]
    {DType::kQ6_K, "q6_K", 256, 210, true},  // u8 ql[128]; u8 qh[64]; i8 scales[16]; f16 d
    {DType::kQ8_K, "q8_K", 256, 292, true},  // f32 d; i8 qs[256]; i16 bsums[16]
    // The i-quants and MXFP4 (cpu/iquant_blocks.h): grid indices, signs and scales.
    {DType::kIQ2_XXS, "iq2_xxs", 256, 66, true},  // f16 d; u16 qs[32]
    {DType::kIQ2_XS, "iq2_xs", 256, 74, true},    // f16 d; u16 qs[32]; u8 scales[8]
    {DType::kIQ3_XXS, "iq3_xxs", 256, 98, true},  // f16 d; u8 qs[96]
    {DType::kIQ1_S, "iq1_s", 256, 50, true},      // f16 d; u8 qs[32]; u16 qh[8]
    {DType::kIQ4_NL, "iq4_nl", 32, 18, true},     // f16 d; u8 qs[16]
    {DType::kIQ3_S, "iq3_s", 256, 110, true},  // f16 d; u8 qs[64], qh[8], signs[32], scales[4]
    {DType::kIQ2_S, "iq2_s", 256, 82, true},   // f16 d; u8 qs[64], qh[8], scales[8]
    {DType::kIQ4_XS, "iq4_xs", 256, 136, true},  // f16 d; u16 scales_h; u8 scales_l[4], qs[128]
    {DType::kIQ1_M, "iq1_m", 256, 56, true},     // u8 qs[32], qh[16], scales[8]
    {DType::kMXFP4, "mxfp4", 32, 17, true},      // u8 e (E8M0); u8 qs[16]
    {DType::kI8, "i8", 1, 1, false},        {DType::kI16, "i16", 1, 2, false},
    {DType::kI32, "i32", 1, 4, false},      {DType::kI64, "i64", 1, 8, false},
    {DType::kF64, "f64", 1, 8, false},      {DType::kBF16, "bf16", 1, 2, true},
}};

const DTypeTraits* Find(uint32_t id) {
  for (const DTypeTraits& t : kTraits) {
    if (static_cast<uint32_t>(t.dtype) == id) return &t;
  }
  return nullptr;
}

}  // namespace

std::optional<DTypeTraits> LookupDType(uint32_t ggml_type_id) {
  const DTypeTraits* t = Find(ggml_type_id);
  if (t == nullptr) return std::nullopt;
  return *t;
}

const DTypeTraits& Traits(DType dtype) {
  const DTypeTraits* t = Find(static_cast<uint32_t>(dtype));
  CHECK(t != nullptr) << "unknown DType id " << static_cast<uint32_t>(dtype);
  return *t;
}

}  // namespace baton::kernels
