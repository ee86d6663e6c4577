// baton generate: one request in-process; only the generated text goes to stdout.
#include <iostream>

#include "absl/strings/str_format.h"
#include "cli/command.h"
#include "cli/remote_generate.h"
#include "engine/chat_template_source.h"
#include "engine/prompt_encoder.h"
#include "engine/generator.h"
#include "engine/model.h"

namespace baton::cli {

int RunGenerate(const Args& args) {
  const std::vector<FlagSpec> specs = {
      {"model", "PATH", "GGUF file or Hugging Face checkpoint directory (default: the default model)"},
      {"prompt", "TEXT", "raw prompt, tokenized as llama.cpp does (BOS per the model)"},
      {"chat", "TEXT", "a user message, formatted with the model's chat template"},
      {"system", "TEXT", "system message for --chat"},
      {"template", "NAME|FILE", "chat template instead of the model's own: a Jinja file, or "
                                "chatml | llama3 | gemma"},
      {"max-tokens", "N", "tokens to generate at most (default 256)"},
      {"temperature", "T", "0 = greedy (default 0.8)"},
      {"top-k", "K", "0 = off (default 40)"},
      {"top-p", "P", "in (0, 1] (default 0.95)"},
      {"min-p", "P", "in [0, 1] (default 0.05)"},
      {"repeat-penalty", "R", "> 0, 1 = off (default 1)"},
      {"presence-penalty", "X", "in [-2, 2] (default 0)"},
      {"frequency-penalty", "X", "in [-2, 2] (default 0)"},
      {"seed", "S", "random seed (default 47984)"},
      {"stop", "TEXT", "stop when the text contains TEXT"},
      {"ignore-eos", "", "keep generating past end-of-generation tokens"},
      DeviceFlagSpec(),
      QuantizeFlagSpec(),
      {"threads", "N", "CPU threads (default: all cores)"},
      {"server", "HOST:PORT", "send the request to a baton router instead of running in-process"},
      {"token", "TOKEN", "with --server: the cluster's shared token"},
      {"tls-ca", "PEM", "with --server: verify the router's TLS certificate with this CA"},
      {"timeout", "SECONDS", "with --server: the request's deadline (default 600)"},
      {"help", "", "show this help"},
  };
  const std::string usage = Usage(
      "generate", "(--prompt TEXT | --chat TEXT [--system TEXT]) [--model PATH] [flags]", specs);
  absl::StatusOr<Flags> flags = Flags::Parse(args, specs);
  if (!flags.ok()) return UsageError("generate", flags.status(), usage);
  if (flags->Has("help")) {
    std::cout << usage;
    return 0;
  }
  if (flags->Has("prompt") == flags->Has("chat")) {
    return UsageError("generate", absl::InvalidArgumentError("give exactly one of --prompt, --chat"),
                      usage);
  }
  if (flags->Has("system") && !flags->Has("chat")) {
    return UsageError("generate", absl::InvalidArgumentError("--system needs --chat"), usage);
  }
  engine::SamplingParams params;
  absl::Status parsed = [&]() -> absl::Status {
    absl::StatusOr<int64_t> i;
    absl::StatusOr<double> d;
    if (!(i = flags->GetInt("max-tokens", engine::kDefaultMaxTokens, 1, 1 << 20)).ok()) {
      return i.status();
    }
    params.max_tokens = static_cast<int32_t>(*i);
    if (!(d = flags->GetDouble("temperature", 0.8, 0, 100)).ok()) return d.status();
    params.temperature = static_cast<float>(*d);
    if (!(i = flags->GetInt("top-k", 40, 0, 1 << 30)).ok()) return i.status();
    params.top_k = static_cast<int32_t>(*i);
    if (!(d = flags->GetDouble("top-p", 0.95, 1e-9, 1)).ok()) return d.status();
    params.top_p = static_cast<float>(*d);
    if (!(d = flags->GetDouble("min-p", 0.05, 0, 1)).ok()) return d.status();
    params.min_p = static_cast<float>(*d);
    if (!(d = flags->GetDouble("repeat-penalty", 1, 1e-6, 100)).ok()) return d.status();
    params.repetition_penalty = static_cast<float>(*d);
    if (!(d = flags->GetDouble("presence-penalty", 0, -2, 2)).ok()) return d.status();
    params.presence_penalty = static_cast<float>(*d);
    if (!(d = flags->GetDouble("frequency-penalty", 0, -2, 2)).ok()) return d.status();
    params.frequency_penalty = static_cast<float>(*d);
    if (!(i = flags->GetInt("seed", engine::kDefaultSamplingSeed, 0, INT64_MAX)).ok()) {
      return i.status();
    }
    params.seed = static_cast<uint64_t>(*i);
    if (auto stop = flags->Get("stop")) params.stop_strings.push_back(*stop);
    params.ignore_eos = flags->Has("ignore-eos");
    return absl::OkStatus();
  }();
  if (!parsed.ok()) return UsageError("generate", parsed, usage);
  absl::StatusOr<int64_t> threads = flags->GetInt("threads", 0, 0, 1024);
  if (!threads.ok()) return UsageError("generate", threads.status(), usage);
  absl::StatusOr<kernels::Device> device = DeviceFlag(*flags);
  if (!device.ok()) return UsageError("generate", device.status(), usage);

  const std::string text = flags->GetOr(flags->Has("prompt") ? "prompt" : "chat", "");
  std::vector<engine::ChatMessage> chat;
  if (flags->Has("chat")) {
    if (auto system = flags->Get("system")) chat.push_back({"system", *system});
    chat.push_back({"user", text});
  }

  if (flags->Has("server")) {
    absl::StatusOr<int64_t> timeout = flags->GetInt("timeout", 600, 1, 86400);
    if (!timeout.ok()) return UsageError("generate", timeout.status(), usage);
    RemoteGenerateOptions remote;
    remote.address = *flags->Get("server");
    remote.timeout = std::chrono::seconds(*timeout);
    remote.client.auth_token = flags->GetOr("token", "");
    remote.client.tls.ca_file = flags->GetOr("tls-ca", "");
    if (flags->Has("chat")) {
      remote.chat = chat;
    } else {
      remote.prompt = text;
    }
    return RunRemoteGenerate(remote, params);
  }

  absl::StatusOr<engine::LoadOptions> load = LoadOptionsFlag(*flags);
  if (!load.ok()) return UsageError("generate", load.status(), usage);
  absl::StatusOr<std::unique_ptr<engine::Model>> model =
      engine::Model::Load(flags->GetOr("model", DefaultModelPath()), *load);
  if (!model.ok()) return RunError("generate", model.status());
  absl::StatusOr<std::string> chat_template = engine::ChatTemplateSource(
      flags->GetOr("template", ""), (*model)->tokenizer().vocab().chat_template);
  if (flags->Has("template") && !chat_template.ok()) {
    return UsageError("generate", chat_template.status(), usage);
  }
  const engine::PromptEncoder encoder(&(*model)->tokenizer(), chat_template);
  absl::StatusOr<std::vector<engine::TokenId>> encoded =
      flags->Has("chat") ? encoder.EncodeChat(engine::TextChat(chat)) : encoder.EncodeText(text);
  if (!encoded.ok()) return RunError("generate", encoded.status());
  const std::vector<engine::TokenId>& prompt = *encoded;

  absl::StatusOr<std::unique_ptr<engine::Generator>> generator = engine::Generator::Create(
      model->get(), {.device = *device,
                     .n_threads = static_cast<int>(*threads),
                     .max_context = std::min<int32_t>((*model)->config().n_ctx_train,
                                                      static_cast<int32_t>(prompt.size()) +
                                                          params.max_tokens)});
  if (!generator.ok()) return RunError("generate", generator.status());
  if (static_cast<int64_t>(prompt.size()) + params.max_tokens > (*model)->config().n_ctx_train) {
    return RunError("generate", absl::InvalidArgumentError(absl::StrFormat(
                                    "prompt (%d tokens) + --max-tokens (%d) exceeds the model's "
                                    "context of %d tokens",
                                    prompt.size(), params.max_tokens,
                                    (*model)->config().n_ctx_train)));
  }
  absl::StatusOr<engine::GenerationResult> result =
      (*generator)->Generate(prompt, params, [](std::string_view delta) {
        std::cout << delta << std::flush;
      });
  if (!result.ok()) return RunError("generate", result.status());
  std::cout << "\n" << std::flush;
  const int n_out = static_cast<int>(result->output_tokens.size());
  std::cerr << absl::StrFormat(
      "baton generate: prompt %d tokens in %.3f s (TTFT), %d tokens generated, %.1f tokens/s "
      "decode, finish: %s\n",
      result->n_prompt, result->prefill_seconds, n_out,
      n_out > 1 ? (n_out - 1) / result->decode_seconds : 0.0,
      engine::FinishReasonName(result->finish_reason));
  return 0;
}

}  // namespace baton::cli
