// Runs one request to completion in-process: prefill the prompt, then decode token by token,
// streaming text as it becomes final. `baton generate` uses it; serving uses the same parts
// (Transformer, GenerationState, Sampler) spread over workers.
//
// Thread-compatible: one Generator per thread (it owns a Transformer and a KV cache).
#ifndef BATON_ENGINE_GENERATOR_H_
#define BATON_ENGINE_GENERATOR_H_

#include <functional>
#include <memory>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/generation_state.h"
#include "engine/kv_cache.h"
#include "engine/model.h"
#include "engine/sampler.h"
#include "engine/transformer.h"
#include "kernels/device.h"

namespace baton::engine {

struct GeneratorOptions {
  kernels::Device device;       // where the model runs (cpu, cuda:N)
  int n_threads = 0;            // 0: every core the process may use (the CPU backend's pool)
  int32_t max_context = 0;      // tokens of KV to allocate; 0: the model's context length
  bool reference_kernels = false;
};

struct GenerationResult {
  std::vector<TokenId> output_tokens;
  FinishReason finish_reason = FinishReason::kNone;
  int32_t n_prompt = 0;
  double prefill_seconds = 0;   // prompt forward + first token (TTFT)
  double decode_seconds = 0;    // every later token
};

class Generator {
 public:
  static absl::StatusOr<std::unique_ptr<Generator>> Create(const Model* model,
                                                           const GeneratorOptions& options);

  // Generates for `prompt` (token ids). INVALID_ARGUMENT for an empty prompt, bad sampling
  // parameters, or a prompt that leaves no room to generate. `on_text` receives each text delta.
  absl::StatusOr<GenerationResult> Generate(
      const std::vector<TokenId>& prompt, const SamplingParams& params,
      const std::function<void(std::string_view)>& on_text = nullptr);

  // Logits [prompt.size(), n_vocab] for every position of `prompt`, on a fresh sequence
  // (perplexity, teacher forcing). Long prompts are processed in chunks of `chunk` tokens.
  absl::StatusOr<std::vector<float>> AllLogits(const std::vector<TokenId>& prompt,
                                               int32_t chunk = 512);

  const Model& model() const { return *model_; }
  Transformer& transformer() { return *transformer_; }
  KvCache& kv_cache() { return *cache_; }
  kernels::Backend& backend() { return *backend_; }

 private:
  Generator() = default;
  const Model* model_ = nullptr;
  int32_t max_context_ = 0;
  std::unique_ptr<kernels::Backend> backend_;
  std::unique_ptr<KvCache> cache_;
  std::unique_ptr<Transformer> transformer_;
  Sampler sampler_;
};

}  // namespace baton::engine

#endif  // BATON_ENGINE_GENERATOR_H_
