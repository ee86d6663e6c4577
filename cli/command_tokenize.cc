// baton tokenize --model PATH [--add-bos] [--parse-special]: stdin text -> token ids on one line.
#include <iostream>
#include <iterator>
#include <sstream>

#include "cli/command.h"
#include "engine/tokenizer.h"

namespace baton::cli {

int RunTokenize(const Args& args) {
  const std::vector<FlagSpec> specs = {
      {"model", "PATH", "GGUF file (a vocabulary-only file works), tokenizer.json, or a directory with one (default: the default model)"},
      {"add-bos", "", "prepend the BOS token"},
      {"parse-special", "", "recognize special-token text such as <|im_start|>"},
      {"help", "", "show this help"},
  };
  const std::string usage =
      Usage("tokenize", "[--model PATH] [--add-bos] [--parse-special] < text", specs);
  absl::StatusOr<Flags> flags = Flags::Parse(args, specs);
  if (!flags.ok()) return UsageError("tokenize", flags.status(), usage);
  if (flags->Has("help")) {
    std::cout << usage;
    return 0;
  }
  absl::StatusOr<std::unique_ptr<engine::Tokenizer>> tokenizer =
      engine::Tokenizer::Load(flags->GetOr("model", DefaultModelPath()));
  if (!tokenizer.ok()) return RunError("tokenize", tokenizer.status());

  std::string text(std::istreambuf_iterator<char>(std::cin), {});
  const std::vector<engine::TokenId> ids = (*tokenizer)->Encode(
      text, {.add_bos = flags->Has("add-bos"), .parse_special = flags->Has("parse-special")});
  std::ostringstream out;
  for (size_t i = 0; i < ids.size(); ++i) out << (i ? " " : "") << ids[i];
  std::cout << out.str() << "\n";
  return 0;
}

}  // namespace baton::cli
