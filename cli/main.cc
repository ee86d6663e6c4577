// The `baton` binary: one entry point, one subcommand per job.
#include <iostream>
#include <string>
#include <string_view>
#include <vector>

#include "base/allocator.h"
#include "base/log.h"
#include "cli/command.h"

namespace {

constexpr char kUsage[] =
    "usage: baton COMMAND [FLAGS]\n"
    "commands:\n"
    "  info        describe a GGUF model file (architecture, tensors, tokenizer, template)\n"
    "  tokenize    print the token ids of UTF-8 text read from stdin\n"
    "  chat-template  render a chat (JSON on stdin) with a model's or a named chat template\n"
    "  generate    generate text from a prompt or a chat message\n"
    "  perplexity  perplexity of a model on a text file\n"
    "  bench       benchmarks (bench engine)\n"
    "  prefill     run a prefill worker\n"
    "  decode      run a decode worker\n"
    "  worker      run a worker of any role (--role both: colocated)\n"
    "  router      run the router (gRPC API; workers register with it)\n"
    "  up          start a local cluster (router + workers) and keep it running\n"
    "  make-model  write a model with random weights in the shape of a real one (benchmarks)\n"
    "Run 'baton COMMAND --help' for a command's flags.\n";

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::cerr << kUsage;
    return 2;
  }
  baton::TuneHeapForBulkTransfers();
  std::string_view command = argv[1];
  std::vector<std::string> args(argv + 2, argv + argc);
  using namespace baton::cli;
  baton::SetLogTag(std::string(command));
  if (command == "info") return RunInfo(args);
  if (command == "tokenize") return RunTokenize(args);
  if (command == "chat-template") return RunChatTemplate(args);
  if (command == "generate") return RunGenerate(args);
  if (command == "perplexity") return RunPerplexity(args);
  if (command == "bench") return RunBench(args);
  if (command == "worker") return RunWorker(args);
  if (command == "prefill") return RunPrefill(args);
  if (command == "decode") return RunDecode(args);
  if (command == "router") return RunRouter(args);
  if (command == "up") return RunUp(args);
  if (command == "make-model") return RunMakeModel(args);
  if (command == "help" || command == "--help" || command == "-h") {
    std::cout << kUsage;
    return 0;
  }
  std::cerr << "baton: unknown command '" << command << "'\n" << kUsage;
  return 2;
}
