// baton perplexity --model PATH --file TEXT: exp(mean negative log-likelihood) of the file's tokens.
#include <cmath>
#include <fstream>
#include <iostream>
#include <iterator>

#include "absl/strings/str_format.h"
#include "cli/command.h"
#include "engine/generator.h"
#include "engine/model.h"
#include "engine/perplexity.h"

namespace baton::cli {

int RunPerplexity(const Args& args) {
  const std::vector<FlagSpec> specs = {
      {"model", "PATH", "GGUF model (default: the default model)"},
      {"file", "PATH", "UTF-8 text to score"},
      {"ctx", "N", "tokens per window (default 2048); each window is scored on its own"},
      {"threads", "N", "CPU threads (default: all cores)"},
      {"help", "", "show this help"},
  };
  const std::string usage = Usage("perplexity", "--file PATH [--model PATH] [--ctx N]", specs);
  absl::StatusOr<Flags> flags = Flags::Parse(args, specs);
  if (!flags.ok()) return UsageError("perplexity", flags.status(), usage);
  if (flags->Has("help")) {
    std::cout << usage;
    return 0;
  }
  if (!flags->Has("file")) {
    return UsageError("perplexity", absl::InvalidArgumentError("--file is required"), usage);
  }
  absl::StatusOr<int64_t> ctx = flags->GetInt("ctx", 2048, 2, 1 << 20);
  if (!ctx.ok()) return UsageError("perplexity", ctx.status(), usage);
  absl::StatusOr<int64_t> threads = flags->GetInt("threads", 0, 0, 1024);
  if (!threads.ok()) return UsageError("perplexity", threads.status(), usage);

  std::ifstream in(*flags->Get("file"), std::ios::binary);
  if (!in) {
    return RunError("perplexity",
                    absl::NotFoundError(absl::StrFormat("cannot read '%s'", *flags->Get("file"))));
  }
  std::string text(std::istreambuf_iterator<char>(in), {});
  absl::StatusOr<std::unique_ptr<engine::Model>> model =
      engine::Model::Load(flags->GetOr("model", DefaultModelPath()));
  if (!model.ok()) return RunError("perplexity", model.status());
  const int32_t window = std::min<int32_t>(*ctx, (*model)->config().n_ctx_train);
  absl::StatusOr<std::unique_ptr<engine::Generator>> generator = engine::Generator::Create(
      model->get(), {.n_threads = static_cast<int>(*threads), .max_context = window});
  if (!generator.ok()) return RunError("perplexity", generator.status());
  const engine::Tokenizer& tokenizer = (*model)->tokenizer();
  const std::vector<engine::TokenId> tokens =
      tokenizer.Encode(text, {.add_bos = tokenizer.vocab().add_bos});
  absl::StatusOr<engine::PerplexityResult> result =
      engine::ComputePerplexity(**generator, tokens, window);
  if (!result.ok()) return RunError("perplexity", result.status());
  std::cout << absl::StrFormat("perplexity: %.4f over %d scored tokens (%d windows of %d)\n",
                               result->perplexity, result->n_scored, result->n_windows, window);
  return 0;
}

}  // namespace baton::cli
