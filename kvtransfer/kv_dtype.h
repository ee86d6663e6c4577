// The element types KV travels in (KvPushHeader.dtype), and the conversions between them.
//
// A sender pushes its own cache's type: "f16" from the CPU engine (engine/kv_cache.h); a GPU
// engine may keep "bf16" or "f32". A receiver whose cache holds another type converts on
// arrival, so a prefill worker and a decode worker need not agree on their caches' types.
//
// Thread-safety: pure functions.
#ifndef BATON_KVTRANSFER_KV_DTYPE_H_
#define BATON_KVTRANSFER_KV_DTYPE_H_

#include <cstdint>
#include <optional>
#include <string_view>

namespace baton::kvtransfer {

enum class KvDtype { kF16, kBF16, kF32 };

// "f16", "bf16", "f32": the header's spelling.
std::string_view KvDtypeName(KvDtype dtype);
// nullopt for any other spelling.
std::optional<KvDtype> ParseKvDtype(std::string_view name);
// Bytes per element: 2, 2, 4.
int32_t KvDtypeBytes(KvDtype dtype);

// Converts `n` elements from type `from` at `in` to type `to` at `out` (the same type: a copy).
// Rounds to nearest even; NaN stays NaN; f32 or bf16 values beyond f16's range become +-inf, as
// a GPU's f16 conversion does. `in` and `out` must not overlap.
void ConvertKv(KvDtype from, const uint8_t* in, KvDtype to, uint8_t* out, int64_t n);

}  // namespace baton::kvtransfer

#endif  // BATON_KVTRANSFER_KV_DTYPE_H_
