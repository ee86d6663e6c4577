#include "engine/text_preparation.h"

#include "absl/strings/str_replace.h"
#include "absl/strings/string_view.h"
#include "engine/unicode.h"
#include "engine/unicode_nfc.h"

namespace baton::engine {

std::string NormalizeText(const TextPreparation& preparation, std::string_view text) {
  std::string out = unicode::IsValidUtf8(text) ? std::string(text) : unicode::SanitizeUtf8(text);
  if (preparation.nfc) out = unicode::ToNfc(out);
  for (const auto& [from, to] : preparation.replace) {
    out = absl::StrReplaceAll(out, {{absl::string_view(from.data(), from.size()),
                                     absl::string_view(to.data(), to.size())}});
  }
  if (!preparation.prepend.empty() && !out.empty()) out.insert(0, preparation.prepend);
  return out;
}

}  // namespace baton::engine
