// A Hugging Face checkpoint's config.json read as the GGUF metadata llama.cpp's converter writes
// for the same model: each field the architecture runs becomes its GGUF key, and every field
// whose value baton would run differently from transformers is an error naming the file and the
// field (a bias it has no place for, a routing it does not run, a RoPE type it lacks).
//
// Architectures (config.json's "architectures"[0] -> GGUF's general.architecture):
// LlamaForCausalLM, MistralForCausalLM, MixtralForCausalLM -> llama; Qwen2ForCausalLM -> qwen2;
// Qwen3ForCausalLM -> qwen3; Qwen2MoeForCausalLM -> qwen2moe; Qwen3MoeForCausalLM -> qwen3moe;
// Gemma3ForCausalLM -> gemma3; GptOssForCausalLM -> gpt-oss; DeepseekV2ForCausalLM,
// DeepseekV3ForCausalLM -> deepseek2 (latent attention; the multi-token-prediction layers after
// num_hidden_layers are not run, as transformers does not).
//
// Thread-safety: a pure function of its arguments.
#ifndef BATON_ENGINE_HF_CONFIG_H_
#define BATON_ENGINE_HF_CONFIG_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/gguf_value.h"
#include "nlohmann/json.hpp"

namespace baton::engine {

struct HfConfig {
  std::string architecture;  // GGUF's general.architecture
  std::vector<std::pair<std::string, GgufValue>> metadata;
  // Llama 3's RoPE scaling as GGUF's rope_freqs.weight [head_dim / 2]; empty where none.
  std::vector<float> rope_freq_factors;
  // Whether the checkpoint's Q/K rows are in NeoX-style RoPE's order (two halves; every
  // architecture but DeepSeek's, whose rope_interleave keeps pairs adjacent).
  bool rope_neox = true;
  int32_t n_layer = 0;       // num_hidden_layers: tensors of later layers are not read
  bool tied_output = false;  // tie_word_embeddings: lm_head.weight, if stored, is not read
};

// `config` is config.json's object, read from `file` (for errors); `name` becomes general.name.
absl::StatusOr<HfConfig> ReadHfConfig(const nlohmann::json& config, const std::string& file,
                                      const std::string& name);

// The architectures ReadHfConfig takes, as a comma-separated list.
std::string HfArchitectureList();

}  // namespace baton::engine

#endif  // BATON_ENGINE_HF_CONFIG_H_
