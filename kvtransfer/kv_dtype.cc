#include "kvtransfer/kv_dtype.h"

#include <cstring>

#include "kernels/half.h"

namespace baton::kvtransfer {
namespace {

float ReadElement(KvDtype dtype, const uint8_t* in, int64_t i) {
  if (dtype == KvDtype::kF32) {
    float f;
    std::memcpy(&f, in + 4 * i, 4);
    return f;
  }
  uint16_t h;
  std::memcpy(&h, in + 2 * i, 2);
  return dtype == KvDtype::kF16 ? kernels::F16ToF32(h) : kernels::BF16ToF32(h);
}

void WriteElement(KvDtype dtype, float f, uint8_t* out, int64_t i) {
  if (dtype == KvDtype::kF32) {
    std::memcpy(out + 4 * i, &f, 4);
    return;
  }
  const uint16_t h = dtype == KvDtype::kF16 ? kernels::F32ToF16(f) : kernels::F32ToBF16(f);
  std::memcpy(out + 2 * i, &h, 2);
}

}  // namespace

std::string_view KvDtypeName(KvDtype dtype) {
  switch (dtype) {
    case KvDtype::kF16:
      return "f16";
    case KvDtype::kBF16:
      return "bf16";
    case KvDtype::kF32:
      return "f32";
  }
  return "?";
}

std::optional<KvDtype> ParseKvDtype(std::string_view name) {
  for (KvDtype dtype : {KvDtype::kF16, KvDtype::kBF16, KvDtype::kF32}) {
    if (name == KvDtypeName(dtype)) return dtype;
  }
  return std::nullopt;
}

int32_t KvDtypeBytes(KvDtype dtype) { return dtype == KvDtype::kF32 ? 4 : 2; }

void ConvertKv(KvDtype from, const uint8_t* in, KvDtype to, uint8_t* out, int64_t n) {
  if (from == to) {
    std::memcpy(out, in, static_cast<size_t>(n) * KvDtypeBytes(from));
    return;
  }
  // Every value of f16 and bf16 is exact in f32, so one rounding happens, at the write.
  for (int64_t i = 0; i < n; ++i) WriteElement(to, ReadElement(from, in, i), out, i);
}

}  // namespace baton::kvtransfer
