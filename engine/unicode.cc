#include "engine/unicode.h"

#include <array>

namespace baton::engine::unicode {
namespace {

struct ByteAlphabet {
  std::array<std::string, 256> byte_to_text;
  std::array<int16_t, 324> cpt_to_byte;  // code points 0..323 cover the whole alphabet
};

const ByteAlphabet& Alphabet() {
  static const ByteAlphabet* const alphabet = [] {
    auto* a = new ByteAlphabet();
    a->cpt_to_byte.fill(-1);
    auto is_printable = [](int b) {
      return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    };
    int n = 0;
    for (int b = 0; b < 256; ++b) {
      const uint32_t cpt = is_printable(b) ? static_cast<uint32_t>(b) : 256u + n++;
      AppendUtf8(cpt, &a->byte_to_text[b]);
      a->cpt_to_byte[cpt] = static_cast<int16_t>(b);
    }
    return a;
  }();
  return *alphabet;
}

}  // namespace

size_t Utf8LengthFromLeadByte(uint8_t lead) {
  static constexpr size_t kLengths[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
  return kLengths[lead >> 4];
}

void DecodeUtf8Lenient(std::string_view text, std::vector<uint32_t>* out) {
  const auto* p = reinterpret_cast<const uint8_t*>(text.data());
  const size_t n = text.size();
  out->reserve(out->size() + n);
  size_t i = 0;
  while (i < n) {
    const uint8_t b0 = p[i];
    if (b0 < 0x80) {
      out->push_back(b0);
      ++i;
      continue;
    }
    size_t len = 0;
    uint32_t cpt = 0;
    if ((b0 & 0x40) == 0) {
      len = 0;  // a continuation byte cannot start a sequence
    } else if ((b0 & 0x20) == 0) {
      len = 2;
      cpt = b0 & 0x1F;
    } else if ((b0 & 0x10) == 0) {
      len = 3;
      cpt = b0 & 0x0F;
    } else if ((b0 & 0x08) == 0) {
      len = 4;
      cpt = b0 & 0x07;
    }
    bool ok = len != 0 && i + len - 1 < n;
    for (size_t k = 1; ok && k < len; ++k) {
      ok = (p[i + k] & 0xC0) == 0x80;
      cpt = (cpt << 6) | (p[i + k] & 0x3F);
    }
    if (ok && cpt > 0x10FFFF) ok = false;
    if (!ok) {
      out->push_back(kReplacementChar);
      ++i;
      continue;
    }
    out->push_back(cpt);
    i += len;
  }
}

void AppendUtf8(uint32_t cpt, std::string* out) {
  if (cpt <= 0x7F) {
    out->push_back(static_cast<char>(cpt));
  } else if (cpt <= 0x7FF) {
    out->push_back(static_cast<char>(0xC0 | (cpt >> 6)));
    out->push_back(static_cast<char>(0x80 | (cpt & 0x3F)));
  } else if (cpt <= 0xFFFF) {
    out->push_back(static_cast<char>(0xE0 | (cpt >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cpt >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cpt & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | ((cpt >> 18) & 0x07)));
    out->push_back(static_cast<char>(0x80 | ((cpt >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cpt >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cpt & 0x3F)));
  }
}

Utf8Scan ScanUtf8(std::string_view bytes, size_t* length) {
  const auto* p = reinterpret_cast<const uint8_t*>(bytes.data());
  const uint8_t b0 = p[0];
  if (b0 < 0x80) {
    *length = 1;
    return Utf8Scan::kValid;
  }
  size_t need = 0;
  uint8_t lo = 0x80;  // allowed range of the second byte
  uint8_t hi = 0xBF;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    need = 1;
  } else if (b0 == 0xE0) {
    need = 2;
    lo = 0xA0;
  } else if ((b0 >= 0xE1 && b0 <= 0xEC) || b0 == 0xEE || b0 == 0xEF) {
    need = 2;
  } else if (b0 == 0xED) {
    need = 2;
    hi = 0x9F;
  } else if (b0 == 0xF0) {
    need = 3;
    lo = 0x90;
  } else if (b0 >= 0xF1 && b0 <= 0xF3) {
    need = 3;
  } else if (b0 == 0xF4) {
    need = 3;
    hi = 0x8F;
  } else {
    *length = 1;
    return Utf8Scan::kInvalid;
  }
  for (size_t k = 1; k <= need; ++k) {
    if (k >= bytes.size()) {
      *length = bytes.size();
      return Utf8Scan::kIncomplete;
    }
    const uint8_t b = p[k];
    const uint8_t l = k == 1 ? lo : 0x80;
    const uint8_t h = k == 1 ? hi : 0xBF;
    if (b < l || b > h) {
      *length = k;
      return Utf8Scan::kInvalid;
    }
  }
  *length = need + 1;
  return Utf8Scan::kValid;
}

std::string SanitizeUtf8(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  size_t i = 0;
  while (i < bytes.size()) {
    size_t len = 0;
    switch (ScanUtf8(bytes.substr(i), &len)) {
      case Utf8Scan::kValid:
        out.append(bytes.data() + i, len);
        break;
      case Utf8Scan::kIncomplete:
      case Utf8Scan::kInvalid:
        AppendUtf8(kReplacementChar, &out);
        break;
    }
    i += len;
  }
  return out;
}

bool IsValidUtf8(std::string_view bytes) {
  size_t i = 0;
  while (i < bytes.size()) {
    size_t len = 0;
    if (ScanUtf8(bytes.substr(i), &len) != Utf8Scan::kValid) return false;
    i += len;
  }
  return true;
}

const std::string& ByteToUnicode(uint8_t byte) { return Alphabet().byte_to_text[byte]; }

int UnicodeToByte(uint32_t cpt) {
  const ByteAlphabet& a = Alphabet();
  return cpt < a.cpt_to_byte.size() ? a.cpt_to_byte[cpt] : -1;
}

}  // namespace baton::engine::unicode
