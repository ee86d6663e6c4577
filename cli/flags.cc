#include "cli/flags.h"

#include <cmath>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace baton::cli {

absl::StatusOr<Flags> Flags::Parse(const std::vector<std::string>& args,
                                   const std::vector<FlagSpec>& specs) {
  Flags flags;
  for (size_t i = 0; i < args.size(); ++i) {
    absl::string_view arg = args[i];
    if (arg.size() < 3 || arg.substr(0, 2) != "--") {
      return absl::InvalidArgumentError(absl::StrCat("unexpected argument '", arg, "'"));
    }
    arg.remove_prefix(2);
    std::optional<std::string> inline_value;
    if (size_t eq = arg.find('='); eq != absl::string_view::npos) {
      inline_value = std::string(arg.substr(eq + 1));
      arg = arg.substr(0, eq);
    }
    const FlagSpec* spec = nullptr;
    for (const FlagSpec& s : specs) {
      if (s.name == arg) spec = &s;
    }
    if (spec == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("unknown flag '--", arg, "'"));
    }
    if (spec->value_name.empty()) {
      if (inline_value) {
        return absl::InvalidArgumentError(absl::StrCat("flag '--", arg, "' takes no value"));
      }
      flags.values_[spec->name] = "true";
    } else if (inline_value) {
      flags.values_[spec->name] = *inline_value;
    } else {
      if (i + 1 >= args.size()) {
        return absl::InvalidArgumentError(
            absl::StrCat("flag '--", arg, "' needs a value (", spec->value_name, ")"));
      }
      flags.values_[spec->name] = args[++i];
    }
  }
  return flags;
}

std::optional<std::string> Flags::Get(absl::string_view name) const {
  auto it = values_.find(name);
  if (it == values_.end()) return std::nullopt;
  return it->second;
}

std::string Flags::GetOr(absl::string_view name, std::string fallback) const {
  return Get(name).value_or(std::move(fallback));
}

absl::StatusOr<int64_t> Flags::GetInt(absl::string_view name, int64_t fallback, int64_t min,
                                      int64_t max) const {
  std::optional<std::string> text = Get(name);
  if (!text) return fallback;
  int64_t value;
  if (!absl::SimpleAtoi(*text, &value)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", name, ": '", *text, "' is not an integer"));
  }
  if (value < min || value > max) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", name, ": ", value, " is outside [", min, ", ", max, "]"));
  }
  return value;
}

absl::StatusOr<double> Flags::GetDouble(absl::string_view name, double fallback, double min,
                                        double max) const {
  std::optional<std::string> text = Get(name);
  if (!text) return fallback;
  double value;
  if (!absl::SimpleAtod(*text, &value) || !std::isfinite(value)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", name, ": '", *text, "' is not a finite number"));
  }
  if (value < min || value > max) {
    return absl::InvalidArgumentError(
        absl::StrFormat("--%s: %g is outside [%g, %g]", name, value, min, max));
  }
  return value;
}

std::string Usage(absl::string_view command, absl::string_view synopsis,
                  const std::vector<FlagSpec>& specs) {
  std::string out = absl::StrCat("usage: baton ", command, " ", synopsis, "\n");
  for (const FlagSpec& s : specs) {
    std::string left = absl::StrCat("  --", s.name, s.value_name.empty() ? "" : " ", s.value_name);
    absl::StrAppendFormat(&out, "%-28s %s\n", left, s.help);
  }
  return out;
}

}  // namespace baton::cli
