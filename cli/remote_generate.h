// `baton generate --server HOST:PORT`: the same request and output as the in-process form, sent
// to a router over gRPC. Text deltas go to stdout as they arrive; usage and timings to stderr.
#ifndef BATON_CLI_REMOTE_GENERATE_H_
#define BATON_CLI_REMOTE_GENERATE_H_

#include <chrono>
#include <string>
#include <vector>

#include "engine/prompt_encoder.h"
#include "engine/sampling_params.h"
#include "rpc/server_options.h"

namespace baton::cli {

struct RemoteGenerateOptions {
  std::string address;
  rpc::ClientOptions client;
  std::chrono::seconds timeout{600};
  std::string prompt;                       // raw prompt, or
  std::vector<engine::ChatMessage> chat;    // chat messages
};

// Returns the process exit code (0, or 1 with the status on stderr).
int RunRemoteGenerate(const RemoteGenerateOptions& options, const engine::SamplingParams& params);

}  // namespace baton::cli

#endif  // BATON_CLI_REMOTE_GENERATE_H_
