// baton chat-template [--model PATH | --template NAME|FILE] [--jsonl] < request.json: renders a
// chat with a model's chat template (or a named one) exactly as transformers' apply_chat_template
// does (BOS text included), for checking a template before serving with it.
#include <ctime>
#include <iostream>
#include <iterator>
#include <memory>
#include <string>

#include "cli/command.h"
#include "engine/chat_template.h"
#include "engine/chat_template_source.h"
#include "engine/prompt_encoder.h"
#include "engine/tokenizer.h"

namespace baton::cli {
namespace {

using Json = nlohmann::ordered_json;

// One request's rendering, or its error.
absl::StatusOr<std::string> RenderRequest(const engine::ChatTemplate& chat_template,
                                          const std::string& text, std::time_t now) {
  Json request = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (request.is_discarded()) return absl::InvalidArgumentError("the request is not valid JSON");
  absl::StatusOr<engine::ChatTemplateInput> input = engine::ChatTemplateInput::FromRequest(request);
  if (!input.ok()) return input.status();
  return chat_template.Render(*input, now);
}

}  // namespace

int RunChatTemplate(const Args& args) {
  const std::vector<FlagSpec> specs = {
      {"model", "PATH",
       "GGUF file whose template and BOS/EOS texts to use (default: the default "
       "model, unless --template names a template)"},
      {"template", "NAME|FILE", "a Jinja template file, or chatml | llama3 | gemma"},
      {"bos", "TEXT", "bos_token's text without --model (default: empty)"},
      {"eos", "TEXT", "eos_token's text without --model (default: empty)"},
      {"now", "SECONDS", "the Unix time strftime_now formats (default: now)"},
      {"jsonl", "", "one request per input line; one {\"text\"} or {\"error\"} line per request"},
      {"print-source", "", "print the template's Jinja source instead of rendering"},
      {"help", "", "show this help"},
  };
  const std::string usage =
      Usage("chat-template",
            "[--model PATH | --template NAME|FILE] [--jsonl] < request.json\n"
            "  request: {\"messages\": [...], \"tools\": [...], \"add_generation_prompt\": true,\n"
            "            \"chat_template_kwargs\": {...}}",
            specs);
  absl::StatusOr<Flags> flags = Flags::Parse(args, specs);
  if (!flags.ok()) return UsageError("chat-template", flags.status(), usage);
  if (flags->Has("help")) {
    std::cout << usage;
    return 0;
  }
  absl::StatusOr<int64_t> now = flags->GetInt("now", std::time(nullptr), 0, int64_t{1} << 40);
  if (!now.ok()) return UsageError("chat-template", now.status(), usage);
  // The model's template and BOS/EOS texts, unless a template is named without a model.
  std::unique_ptr<engine::Tokenizer> tokenizer;
  if (flags->Has("model") || !flags->Has("template")) {
    absl::StatusOr<std::unique_ptr<engine::Tokenizer>> loaded =
        engine::Tokenizer::Load(flags->GetOr("model", DefaultModelPath()));
    if (!loaded.ok()) return RunError("chat-template", loaded.status());
    tokenizer = *std::move(loaded);
  }
  absl::StatusOr<std::string> source = engine::ChatTemplateSource(
      flags->GetOr("template", ""), tokenizer ? tokenizer->vocab().chat_template : "");
  if (!source.ok()) return RunError("chat-template", source.status());
  if (flags->Has("print-source")) {
    std::cout << *source;
    return 0;
  }
  absl::StatusOr<engine::ChatTemplate> chat_template =
      tokenizer ? engine::CompileChatTemplate(*tokenizer, *source)
                : engine::ChatTemplate::Compile(*source, flags->GetOr("bos", ""),
                                                flags->GetOr("eos", ""));
  if (!chat_template.ok()) return RunError("chat-template", chat_template.status());

  if (!flags->Has("jsonl")) {
    const std::string request(std::istreambuf_iterator<char>(std::cin), {});
    absl::StatusOr<std::string> text = RenderRequest(*chat_template, request, *now);
    if (!text.ok()) return RunError("chat-template", text.status());
    std::cout << *text;
    return 0;
  }
  std::string line;
  while (std::getline(std::cin, line)) {
    absl::StatusOr<std::string> text = RenderRequest(*chat_template, line, *now);
    const Json out =
        text.ok() ? Json{{"text", *text}} : Json{{"error", std::string(text.status().message())}};
    std::cout << out.dump(-1, ' ', false, Json::error_handler_t::replace) << "\n";
  }
  return 0;
}

}  // namespace baton::cli
