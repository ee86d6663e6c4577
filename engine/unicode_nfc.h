// Unicode Normalization Form C (canonical decomposition, canonical ordering, canonical
// composition), as Hugging Face's NFC normalizer applies it before tokenizing (Qwen2, Qwen3).
// The tables come from Python's unicodedata (see unicode_nfc_data.h for the version).
//
// Thread-safety: pure functions over constant tables; safe from any thread.
#ifndef BATON_ENGINE_UNICODE_NFC_H_
#define BATON_ENGINE_UNICODE_NFC_H_

#include <string>
#include <string_view>

namespace baton::engine::unicode {

// The NFC form of `text`, which must be well-formed UTF-8. Returns `text` unchanged (one copy)
// when every code point is below the first one NFC can affect, which is the common case.
std::string ToNfc(std::string_view text);

}  // namespace baton::engine::unicode

#endif  // BATON_ENGINE_UNICODE_NFC_H_
