// baton perplexity: how well a model predicts a text, three ways.
//   --file TEXT                              exp(mean negative log-likelihood) of the file's tokens
//   --file TEXT --kl-divergence-base OUT     llama.cpp's scoring; writes the base file OUT
//   --kl-divergence-base IN --kl-divergence  scores the model against the base file IN (its tokens)
// The base files are llama.cpp's (engine/log_prob_file.h): llama-perplexity reads baton's and
// baton reads llama-perplexity's.
#include <cmath>
#include <fstream>
#include <iostream>
#include <iterator>

#include "absl/strings/str_format.h"
#include "cli/command.h"
#include "engine/generator.h"
#include "engine/kl_divergence.h"
#include "engine/log_prob_file.h"
#include "engine/model.h"
#include "engine/perplexity.h"

namespace baton::cli {
namespace {

constexpr char kCommand[] = "perplexity";
constexpr int32_t kLlamaCppDefaultContext = 512;  // llama-perplexity's -c default

struct LoadedModel {
  std::unique_ptr<engine::Model> model;
  int32_t context = 0;                     // tokens a generator evaluates at most
  std::unique_ptr<engine::Generator> generator;
  engine::TokenId bos = engine::kNoToken;  // what ScoreChunks puts first in each chunk
};

// Loads the model with a generator for `context` tokens: at most the model's trained context when
// `clamp`, else an error past it.
absl::StatusOr<LoadedModel> Load(const Flags& flags, int32_t context, bool clamp) {
  absl::StatusOr<int64_t> threads = flags.GetInt("threads", 0, 0, 1024);
  if (!threads.ok()) return threads.status();
  absl::StatusOr<kernels::Device> device = DeviceFlag(flags);
  if (!device.ok()) return device.status();
  absl::StatusOr<engine::LoadOptions> load = LoadOptionsFlag(flags);
  if (!load.ok()) return load.status();
  LoadedModel loaded;
  absl::StatusOr<std::unique_ptr<engine::Model>> model =
      engine::Model::Load(flags.GetOr("model", DefaultModelPath()), *load);
  if (!model.ok()) return model.status();
  loaded.model = *std::move(model);
  const int32_t trained = loaded.model->config().n_ctx_train;
  if (clamp) context = std::min(context, trained);
  if (context > trained) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "a context of %d tokens is longer than the model's %d (--ctx)", context, trained));
  }
  absl::StatusOr<std::unique_ptr<engine::Generator>> generator = engine::Generator::Create(
      loaded.model.get(), {.device = *device,
                           .n_threads = static_cast<int>(*threads),
                           .max_context = context,
                           .reference_kernels = flags.Has("reference-kernels")});
  if (!generator.ok()) return generator.status();
  loaded.generator = *std::move(generator);
  loaded.context = context;
  loaded.bos = engine::ChunkStartToken(loaded.model->tokenizer().vocab());
  return loaded;
}

absl::StatusOr<std::vector<engine::TokenId>> ReadTokens(const Flags& flags,
                                                        const LoadedModel& loaded) {
  std::ifstream in(*flags.Get("file"), std::ios::binary);
  if (!in) {
    return absl::NotFoundError(absl::StrFormat("cannot read '%s' (--file)", *flags.Get("file")));
  }
  const std::string text(std::istreambuf_iterator<char>(in), {});
  const engine::Tokenizer& tokenizer = loaded.model->tokenizer();
  return tokenizer.Encode(text, {.add_bos = tokenizer.vocab().add_bos});
}

int RunPlainPerplexity(const Flags& flags) {
  absl::StatusOr<int64_t> ctx = flags.GetInt("ctx", 2048, 2, 1 << 20);
  if (!ctx.ok()) return RunError(kCommand, ctx.status());
  absl::StatusOr<LoadedModel> loaded = Load(flags, static_cast<int32_t>(*ctx), /*clamp=*/true);
  if (!loaded.ok()) return RunError(kCommand, loaded.status());
  const int32_t window = loaded->context;
  absl::StatusOr<std::vector<engine::TokenId>> tokens = ReadTokens(flags, *loaded);
  if (!tokens.ok()) return RunError(kCommand, tokens.status());
  absl::StatusOr<engine::PerplexityResult> result =
      engine::ComputePerplexity(*loaded->generator, *tokens, window);
  if (!result.ok()) return RunError(kCommand, result.status());
  std::cout << absl::StrFormat("perplexity: %.4f over %d scored tokens (%d windows of %d)\n",
                               result->perplexity, result->n_scored, result->n_windows, window);
  return 0;
}

int RunWriteBase(const Flags& flags, int64_t chunks) {
  absl::StatusOr<int64_t> ctx = flags.GetInt("ctx", kLlamaCppDefaultContext, 2, 1 << 20);
  if (!ctx.ok()) return RunError(kCommand, ctx.status());
  const auto n_ctx = static_cast<int32_t>(*ctx);
  absl::StatusOr<LoadedModel> loaded = Load(flags, n_ctx, /*clamp=*/false);
  if (!loaded.ok()) return RunError(kCommand, loaded.status());
  absl::StatusOr<std::vector<engine::TokenId>> tokens = ReadTokens(flags, *loaded);
  if (!tokens.ok()) return RunError(kCommand, tokens.status());
  const std::string path = *flags.Get("kl-divergence-base");
  absl::StatusOr<engine::PerplexityEstimate> ppl = engine::WriteKlDivergenceBase(
      *loaded->generator, engine::FirstChunks(*std::move(tokens), n_ctx, chunks), n_ctx,
      loaded->bos, path);
  if (!ppl.ok()) return RunError(kCommand, ppl.status());
  std::cout << absl::StrFormat(
      "Final estimate: PPL = %.4f +/- %.5f\n%d scored tokens (%d chunks of %d); base written to "
      "%s\n",
      ppl->perplexity, ppl->uncertainty, ppl->n_scored,
      ppl->n_scored / engine::ScoredPositions(n_ctx), n_ctx, path);
  return 0;
}

void PrintSummary(const engine::KlDivergenceSummary& s) {
  std::cout << absl::StrFormat(
      "====== Perplexity statistics ======\n"
      "Mean PPL(Q)                   : %10.6f ± %10.6f\n"
      "Mean PPL(base)                : %10.6f ± %10.6f\n"
      "Cor(ln(PPL(Q)), ln(PPL(base))): %6.2f%%\n"
      "Mean ln(PPL(Q)/PPL(base))     : %10.6f ± %10.6f\n"
      "Mean PPL(Q)/PPL(base)         : %10.6f ± %10.6f\n"
      "\n====== KL divergence statistics ======\n"
      "Mean    KLD: %10.6f ± %10.6f\n"
      "Maximum KLD: %10.6f\n"
      "99.9%%   KLD: %10.6f\n"
      "99.0%%   KLD: %10.6f\n"
      "Median  KLD: %10.6f\n"
      "Minimum KLD: %10.6f\n"
      "\n====== Token probability statistics ======\n"
      "RMS Δp    : %6.3f ± %5.3f %%\n"
      "Same top p: %6.3f ± %5.3f %%\n"
      "(%d scored positions)\n",
      s.ppl.perplexity, s.ppl.uncertainty, s.ppl_base.perplexity, s.ppl_base.uncertainty,
      100 * s.ln_ppl_correlation, s.ln_ppl_ratio, s.ln_ppl_ratio_uncertainty,
      std::exp(s.ln_ppl_ratio), std::exp(s.ln_ppl_ratio) * s.ln_ppl_ratio_uncertainty, s.kld_mean,
      s.kld_uncertainty, s.kld_max, s.kld_p999, s.kld_p99, s.kld_median, s.kld_min,
      100 * s.rms_delta_p, 100 * s.rms_delta_p_uncertainty, 100 * s.same_top,
      100 * s.same_top_uncertainty, s.count);
}

int RunScoreBase(const Flags& flags, int64_t chunks) {
  absl::StatusOr<std::unique_ptr<engine::LogProbFileReader>> base =
      engine::LogProbFileReader::Open(*flags.Get("kl-divergence-base"));
  if (!base.ok()) return RunError(kCommand, base.status());
  const int32_t n_ctx = (*base)->header().n_ctx;
  absl::StatusOr<int64_t> ctx = flags.GetInt("ctx", n_ctx, 2, 1 << 20);
  if (!ctx.ok()) return RunError(kCommand, ctx.status());
  if (*ctx != n_ctx) {
    return RunError(kCommand, absl::InvalidArgumentError(absl::StrFormat(
                                  "--ctx %d differs from the base file's context of %d", *ctx,
                                  n_ctx)));
  }
  absl::StatusOr<LoadedModel> loaded = Load(flags, n_ctx, /*clamp=*/false);
  if (!loaded.ok()) return RunError(kCommand, loaded.status());
  absl::StatusOr<engine::KlDivergenceSummary> summary =
      engine::ScoreKlDivergence(*loaded->generator, **base, loaded->bos, chunks);
  if (!summary.ok()) return RunError(kCommand, summary.status());
  PrintSummary(*summary);
  return 0;
}

}  // namespace

int RunPerplexity(const Args& args) {
  const std::vector<FlagSpec> specs = {
      {"model", "PATH", "GGUF file or Hugging Face checkpoint directory (default: the default model)"},
      {"file", "PATH", "UTF-8 text to score"},
      {"ctx", "N",
       "tokens per window (default 2048); each window is scored on its own. With "
       "--kl-divergence-base: tokens per chunk, llama-perplexity's -c (default 512; when "
       "scoring, the base file's)"},
      {"kl-divergence-base", "PATH",
       "llama.cpp's KL-divergence base file: written from --file's text, or read with "
       "--kl-divergence"},
      {"kl-divergence", "", "score the model against --kl-divergence-base's log-probabilities"},
      {"chunks", "N", "score at most the first N chunks (default: all)"},
      {"reference-kernels", "", "run the exact scalar reference kernels (to make a base)"},
      DeviceFlagSpec(),
      QuantizeFlagSpec(),
      {"threads", "N", "CPU threads (default: all cores)"},
      {"help", "", "show this help"},
  };
  const std::string usage = Usage(
      kCommand,
      "--file PATH [--model PATH] [--ctx N]\n"
      "       baton perplexity --file PATH --kl-divergence-base OUT [--reference-kernels]\n"
      "       baton perplexity --kl-divergence-base IN --kl-divergence [--model PATH]",
      specs);
  absl::StatusOr<Flags> flags = Flags::Parse(args, specs);
  if (!flags.ok()) return UsageError(kCommand, flags.status(), usage);
  if (flags->Has("help")) {
    std::cout << usage;
    return 0;
  }
  absl::StatusOr<int64_t> chunks = flags->GetInt("chunks", 0, 1, 1 << 30);
  if (!chunks.ok()) return UsageError(kCommand, chunks.status(), usage);
  // Range checks here, so that a bad value is a usage error; the modes read them again.
  if (absl::Status s = flags->GetInt("ctx", 2, 2, 1 << 20).status(); !s.ok()) {
    return UsageError(kCommand, s, usage);
  }
  if (absl::Status s = flags->GetInt("threads", 0, 0, 1024).status(); !s.ok()) {
    return UsageError(kCommand, s, usage);
  }
  if (absl::Status s = DeviceFlag(*flags).status(); !s.ok()) return UsageError(kCommand, s, usage);
  const bool has_base = flags->Has("kl-divergence-base");
  const bool has_file = flags->Has("file");
  if (flags->Has("kl-divergence")) {
    if (!has_base || has_file) {
      return UsageError(kCommand,
                        absl::InvalidArgumentError(
                            "--kl-divergence takes --kl-divergence-base and no --file (the text "
                            "is the base file's)"),
                        usage);
    }
    return RunScoreBase(*flags, *chunks);
  }
  if (!has_file) {
    return UsageError(kCommand, absl::InvalidArgumentError("--file is required"), usage);
  }
  if (has_base) return RunWriteBase(*flags, *chunks);
  return RunPlainPerplexity(*flags);
}

}  // namespace baton::cli
