// UTF-8 and code point helpers for the tokenizer.
//
// Two decoders on purpose:
//  - DecodeUtf8Lenient() reproduces llama.cpp's decoder, which the token ids depend on: it reads a
//    sequence by its lead byte and checks only that the continuation bytes are 10xxxxxx, so it
//    accepts overlong forms and surrogates. A byte that cannot start such a sequence becomes
//    U+FFFD and decoding resumes at the next byte. (A sequence decoding above U+10FFFF, which
//    llama.cpp cannot re-encode, is treated as invalid bytes here, one U+FFFD each.)
//  - ScanUtf8() is the strict decoder (Unicode 3-7, "maximal subpart" replacement) that the
//    detokenizer uses so that it only ever emits well-formed UTF-8.
//
// Also the GPT-2 byte-level alphabet (each byte is mapped to a printable code point).
//
// Thread-safety: pure functions over immutable tables; safe from any thread.
#ifndef BATON_ENGINE_UNICODE_H_
#define BATON_ENGINE_UNICODE_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace baton::engine::unicode {

inline constexpr uint32_t kReplacementChar = 0xFFFD;

// Sequence length announced by a lead byte, as llama.cpp's unicode_len_utf8: 1 for ASCII and for
// continuation bytes, 2, 3 or 4 for 110xxxxx, 1110xxxx, 1111xxxx.
size_t Utf8LengthFromLeadByte(uint8_t lead);

// llama.cpp's lenient decoding (see the header comment). Appends to `out`.
void DecodeUtf8Lenient(std::string_view text, std::vector<uint32_t>* out);

// Appends the UTF-8 encoding of `cpt` (<= 0x10FFFF; surrogates are encoded like any other value,
// as llama.cpp does).
void AppendUtf8(uint32_t cpt, std::string* out);

// Strict scan of one sequence at the start of `bytes` (non-empty).
enum class Utf8Scan {
  kValid,       // *length = length of a well-formed sequence
  kIncomplete,  // all of `bytes` is a proper prefix of a well-formed sequence; more bytes needed
  kInvalid,     // *length = length of the maximal subpart to replace by one U+FFFD (>= 1)
};
Utf8Scan ScanUtf8(std::string_view bytes, size_t* length);

// `bytes` with every ill-formed subsequence (including an incomplete tail) replaced by U+FFFD.
std::string SanitizeUtf8(std::string_view bytes);
bool IsValidUtf8(std::string_view bytes);

// GPT-2 byte-level BPE alphabet: the UTF-8 text of the code point that stands for `byte`.
const std::string& ByteToUnicode(uint8_t byte);
// The byte a code point of that alphabet stands for, or -1 when it is not in the alphabet.
int UnicodeToByte(uint32_t cpt);

}  // namespace baton::engine::unicode

#endif  // BATON_ENGINE_UNICODE_H_
