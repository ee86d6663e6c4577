// Command-line flags of one `baton` subcommand: `--name value`, `--name=value` and boolean
// `--name`. Each subcommand declares the flags it knows; anything else is a usage error.
//
// Thread-compatible (used from main only).
#ifndef BATON_CLI_FLAGS_H_
#define BATON_CLI_FLAGS_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace baton::cli {

struct FlagSpec {
  std::string name;        // without the dashes
  std::string value_name;  // "" for a boolean flag
  std::string help;
};

class Flags {
 public:
  // Parses args (after the subcommand name). INVALID_ARGUMENT names the offending argument.
  static absl::StatusOr<Flags> Parse(const std::vector<std::string>& args,
                                     const std::vector<FlagSpec>& specs);

  bool Has(absl::string_view name) const { return values_.contains(std::string(name)); }
  std::optional<std::string> Get(absl::string_view name) const;
  std::string GetOr(absl::string_view name, std::string fallback) const;

  // Typed values with range checks; the error names the flag and the bad value.
  absl::StatusOr<int64_t> GetInt(absl::string_view name, int64_t fallback, int64_t min,
                                 int64_t max) const;
  absl::StatusOr<double> GetDouble(absl::string_view name, double fallback, double min,
                                   double max) const;

 private:
  std::map<std::string, std::string, std::less<>> values_;
};

// "usage: baton NAME ARGS\n" followed by one line per flag.
std::string Usage(absl::string_view command, absl::string_view synopsis,
                  const std::vector<FlagSpec>& specs);

}  // namespace baton::cli

#endif  // BATON_CLI_FLAGS_H_
