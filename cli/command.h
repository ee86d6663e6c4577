// The `baton` subcommands. Each takes the arguments after its name and returns the process exit
// code: 0 success, 1 failure at run time (message on stderr), 2 usage error (usage on stderr).
#ifndef BATON_CLI_COMMAND_H_
#define BATON_CLI_COMMAND_H_

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "cli/flags.h"
#include "engine/model.h"
#include "kernels/device.h"

namespace baton::cli {

using Args = std::vector<std::string>;

int RunInfo(const Args& args);
int RunTokenize(const Args& args);
int RunChatTemplate(const Args& args);
int RunGenerate(const Args& args);
int RunPerplexity(const Args& args);
int RunBench(const Args& args);
int RunWorker(const Args& args);
int RunPrefill(const Args& args);
int RunDecode(const Args& args);
int RunRouter(const Args& args);
int RunUp(const Args& args);
int RunMakeModel(const Args& args);

// "512M", "2G", "1048576" -> bytes. INVALID_ARGUMENT for anything else.
absl::StatusOr<int64_t> ParseByteSize(const std::string& text);

// Prints "baton COMMAND: MESSAGE" and the usage to stderr; returns 2.
int UsageError(std::string_view command, const absl::Status& status, const std::string& usage);
// Prints "baton COMMAND: MESSAGE" to stderr; returns 1.
int RunError(std::string_view command, const absl::Status& status);

// The --device flag of the commands that run a model, and its value: cpu when absent;
// INVALID_ARGUMENT naming the accepted forms for anything else.
FlagSpec DeviceFlagSpec();
absl::StatusOr<kernels::Device> DeviceFlag(const Flags& flags);

// The --quantize flag of the commands that load a model, and the load options it gives: none
// when absent; INVALID_ARGUMENT naming the accepted types for anything else.
FlagSpec QuantizeFlagSpec();
absl::StatusOr<engine::LoadOptions> LoadOptionsFlag(const Flags& flags);

// --model's default: $BATON_MODEL, else the default model under the source tree's models/ (found
// relative to the binary, build/bin/baton), else models/ under the working directory.
std::string DefaultModelPath();

}  // namespace baton::cli

#endif  // BATON_CLI_COMMAND_H_
