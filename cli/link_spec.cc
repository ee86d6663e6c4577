#include "cli/link_spec.h"

#include <cmath>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace baton::cli {
namespace {

// "10gbit" -> (10, "gbit"); false when there is no leading non-negative number.
bool SplitNumber(const std::string& text, double& number, std::string& unit) {
  size_t i = 0;
  while (i < text.size() && (absl::ascii_isdigit(text[i]) || text[i] == '.')) ++i;
  unit = text.substr(i);
  return i > 0 && absl::SimpleAtod(text.substr(0, i), &number) && std::isfinite(number);
}

}  // namespace

absl::StatusOr<LinkSpec> ParseLinkSpec(const std::string& text, const std::string& where) {
  const std::vector<std::string> parts = absl::StrSplit(absl::AsciiStrToLower(text), ',');
  if (absl::StripAsciiWhitespace(text).empty() || parts.size() > 2) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": '", text, "' is not RATE[,DELAY] (e.g. 10gbit,200us)"));
  }
  LinkSpec spec;
  double number = 0;
  std::string unit;
  const std::string rate(absl::StripAsciiWhitespace(parts[0]));
  if (rate != "none" && rate != "unlimited") {
    const std::vector<std::pair<std::string, double>> units = {
        {"bit", 1}, {"kbit", 1e3}, {"mbit", 1e6}, {"gbit", 1e9}, {"tbit", 1e12}};
    double scale = 0;
    if (SplitNumber(rate, number, unit)) {
      for (const auto& [name, s] : units) scale = unit == name ? s : scale;
    }
    if (scale == 0 || number <= 0 || number * scale > 1e15) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, ": bandwidth '", rate,
          "' is not a positive number with a unit of bit, kbit, mbit, gbit, tbit (e.g. 10gbit)"));
    }
    spec.rate_bits_per_second = static_cast<int64_t>(number * scale);
  }
  if (parts.size() == 2) {
    const std::string delay(absl::StripAsciiWhitespace(parts[1]));
    double scale = 0;
    if (SplitNumber(delay, number, unit)) {
      scale = unit == "us" ? 1e-6 : unit == "ms" ? 1e-3 : unit == "s" ? 1.0 : 0;
    }
    if (scale == 0 || number * scale > 10) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, ": delay '", delay, "' is not a number of us, ms or s up to 10 s (e.g. 200us)"));
    }
    spec.one_way_delay = absl::Seconds(number * scale);
  }
  return spec;
}

}  // namespace baton::cli
