#include "engine/generator.h"

#include <chrono>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "kernels/backend_factory.h"

namespace baton::engine {
namespace {

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

absl::StatusOr<std::unique_ptr<Generator>> Generator::Create(const Model* model,
                                                             const GeneratorOptions& options) {
  std::unique_ptr<Generator> g(new Generator());
  g->model_ = model;
  const ModelConfig& config = model->config();
  g->max_context_ = options.max_context > 0 ? std::min(options.max_context, config.n_ctx_train)
                                            : config.n_ctx_train;
  absl::StatusOr<std::unique_ptr<kernels::Backend>> backend = kernels::CreateBackend(
      options.device, {.n_threads = options.n_threads, .reference = options.reference_kernels});
  if (!backend.ok()) return backend.status();
  g->backend_ = *std::move(backend);
  constexpr int32_t kBlockSize = 16;
  absl::StatusOr<std::unique_ptr<KvCache>> cache = KvCache::Create(
      config, {.block_size = kBlockSize,
               .n_blocks = KvCache::BlocksForTokens(config, kBlockSize, g->max_context_)},
      *g->backend_);
  if (!cache.ok()) return cache.status();
  g->cache_ = std::move(*cache);
  g->transformer_ =
      std::make_unique<Transformer>(&config, &model->weights(), g->backend_.get(), g->cache_.get());
  return g;
}

absl::StatusOr<GenerationResult> Generator::Generate(
    const std::vector<TokenId>& prompt, const SamplingParams& params,
    const std::function<void(std::string_view)>& on_text) {
  const ModelConfig& config = model_->config();
  if (prompt.empty()) return absl::InvalidArgumentError("the prompt is empty");
  if (absl::Status s = ValidateSamplingParams(params, config.n_vocab); !s.ok()) return s;
  if (static_cast<int64_t>(prompt.size()) >= max_context_) {
    return absl::InvalidArgumentError(absl::StrCat("the prompt has ", prompt.size(),
                                                   " tokens; the context holds ", max_context_,
                                                   " and generation needs at least one more"));
  }
  BlockTable kv;
  absl::Cleanup free_kv = [&] { cache_->Free(kv); };
  const int32_t budget =
      std::min<int64_t>(max_context_, static_cast<int64_t>(prompt.size()) + params.max_tokens);
  if (absl::Status s = cache_->Reserve(kv, budget); !s.ok()) return s;

  GenerationResult result;
  result.n_prompt = static_cast<int32_t>(prompt.size());
  GenerationState state(model_->tokenizer(), params, prompt, budget);
  std::vector<float> logits;

  auto start = std::chrono::steady_clock::now();
  SequenceInput input{.tokens = prompt, .kv = &kv};
  if (absl::Status s = transformer_->Prefill({&input, 1}, logits); !s.ok()) return s;
  TokenId token;
  while (true) {
    token = sampler_.Sample(params, logits, state.tokens(),
                            static_cast<int64_t>(state.tokens().size()));
    std::string text = state.Accept(token);
    if (result.output_tokens.empty()) {
      result.prefill_seconds = SecondsSince(start);
      start = std::chrono::steady_clock::now();
    }
    result.output_tokens.push_back(token);
    if (on_text && !text.empty()) on_text(text);
    if (state.finished()) break;
    SequenceInput step{.tokens = {&token, 1}, .kv = &kv};
    if (absl::Status s = transformer_->Decode({&step, 1}, logits); !s.ok()) return s;
  }
  result.decode_seconds = SecondsSince(start);
  result.finish_reason = state.finish_reason();
  return result;
}

absl::StatusOr<std::vector<float>> Generator::AllLogits(const std::vector<TokenId>& prompt,
                                                        int32_t chunk) {
  if (prompt.empty()) return absl::InvalidArgumentError("the text is empty");
  if (static_cast<int64_t>(prompt.size()) > max_context_) {
    return absl::InvalidArgumentError(absl::StrCat("the text has ", prompt.size(),
                                                   " tokens; the context holds ", max_context_));
  }
  BlockTable kv;
  absl::Cleanup free_kv = [&] { cache_->Free(kv); };
  if (absl::Status s = cache_->Reserve(kv, static_cast<int32_t>(prompt.size())); !s.ok()) return s;
  const int64_t n_vocab = model_->config().n_vocab;
  std::vector<float> all(prompt.size() * n_vocab);
  std::vector<float> logits;
  for (size_t begin = 0; begin < prompt.size(); begin += chunk) {
    const size_t count = std::min<size_t>(chunk, prompt.size() - begin);
    SequenceInput input{.tokens = {prompt.data() + begin, count}, .kv = &kv, .all_logits = true};
    if (absl::Status s = transformer_->Prefill({&input, 1}, logits); !s.ok()) return s;
    std::copy(logits.begin(), logits.end(), all.begin() + begin * n_vocab);
  }
  return all;
}

}  // namespace baton::engine
