// libFuzzer target: the files of a Hugging Face checkpoint that baton parses, from arbitrary bytes.
// The first byte picks the format: even, a safetensors file (SafetensorsFile::Open, then every
// tensor's first and last byte read, then its tensors mapped as a gpt-oss's and as a DeepSeek's
// (MapHfTensors: the layouts copied at load) and every mapped tensor's bytes read); odd, a tokenizer.json (LoadTokenizerJson, then the tokenizer
// built and run over the input itself). Aborts on an id out of range; crashes and sanitizer
// reports are the findings.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/hf_config.h"
#include "engine/hf_tensor_map.h"
#include "engine/safetensors_file.h"
#include "engine/tokenizer.h"
#include "engine/tokenizer_json.h"

namespace {

// A file of this process's own, rewritten for every input (in memory where /dev/shm exists).
const std::string& ScratchPath(const char* suffix) {
  static const std::string dir = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
  static std::string paths[2];
  std::string& path = paths[suffix[0] == '.' && suffix[1] == 's' ? 0 : 1];
  if (path.empty()) path = dir + "/checkpoint_fuzz." + std::to_string(getpid()) + suffix;
  return path;
}

void Write(const std::string& path, const uint8_t* data, size_t size) {
  std::ofstream(path, std::ios::binary | std::ios::trunc)
      .write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
}

// Small gpt-oss and DeepSeek V3 configs (2 layers, 4 heads), read once.
const std::vector<std::pair<baton::engine::HfConfig, nlohmann::json>>& Configs() {
  static const auto* configs = [] {
    auto* out = new std::vector<std::pair<baton::engine::HfConfig, nlohmann::json>>;
    const nlohmann::json common = {
        {"hidden_size", 64},       {"num_hidden_layers", 2}, {"num_attention_heads", 4},
        {"intermediate_size", 64}, {"vocab_size", 64},       {"max_position_embeddings", 128},
        {"rms_norm_eps", 1e-6}};
    nlohmann::json gpt_oss = common, deepseek = common;
    gpt_oss.update({{"architectures", {"GptOssForCausalLM"}}, {"sliding_window", 16},
                    {"num_local_experts", 4}, {"num_experts_per_tok", 2}, {"head_dim", 16}});
    deepseek.update({{"architectures", {"DeepseekV3ForCausalLM"}}, {"kv_lora_rank", 16},
                     {"qk_rope_head_dim", 8}, {"qk_nope_head_dim", 8}, {"v_head_dim", 8},
                     {"n_routed_experts", 4}, {"num_experts_per_tok", 2},
                     {"moe_intermediate_size", 32}});
    for (const nlohmann::json& json : {gpt_oss, deepseek}) {
      absl::StatusOr<baton::engine::HfConfig> config = baton::engine::ReadHfConfig(json, "", "");
      if (!config.ok()) {
        std::fprintf(stderr, "checkpoint_fuzz: %s\n", config.status().ToString().c_str());
        std::abort();
      }
      out->emplace_back(*std::move(config), json);
    }
    return out;
  }();
  return *configs;
}

void Safetensors(const uint8_t* data, size_t size) {
  const std::string& path = ScratchPath(".safetensors");
  Write(path, data, size);
  absl::StatusOr<std::unique_ptr<baton::engine::SafetensorsFile>> file =
      baton::engine::SafetensorsFile::Open(path);
  if (!file.ok()) return;
  volatile uint8_t sink = 0;
  std::vector<baton::engine::HfStoredTensor> stored;
  for (const baton::engine::SafetensorsTensor& t : (*file)->tensors()) {
    if (t.n_bytes > 0) sink = sink + t.data[0] + t.data[t.n_bytes - 1];
    stored.push_back({.tensor = &t, .mapping = &(*file)->mapping(), .shard = path});
  }
  for (const auto& [config, json] : Configs()) {
    baton::engine::HfOwnedBuffers owned;
    absl::StatusOr<std::vector<baton::engine::HfMappedTensor>> mapped =
        baton::engine::MapHfTensors(stored, config, json, &owned);
    if (!mapped.ok()) continue;
    for (const baton::engine::HfMappedTensor& t : *mapped) {
      if (t.info.n_bytes > 0) sink = sink + t.info.data[0] + t.info.data[t.info.n_bytes - 1];
    }
  }
}

void TokenizerJson(const uint8_t* data, size_t size) {
  const std::string& path = ScratchPath(".json");
  Write(path, data, size);
  absl::StatusOr<baton::engine::Vocab> vocab = baton::engine::LoadTokenizerJson(path);
  if (!vocab.ok()) return;
  absl::StatusOr<std::unique_ptr<baton::engine::Tokenizer>> tokenizer =
      baton::engine::Tokenizer::Create(*std::move(vocab));
  if (!tokenizer.ok()) return;
  const std::string text(reinterpret_cast<const char*>(data), size);
  for (bool special : {false, true}) {
    for (baton::engine::TokenId id : (*tokenizer)->Encode(text, {.parse_special = special})) {
      if (id < 0 || id >= (*tokenizer)->vocab().size()) {
        std::fprintf(stderr, "checkpoint_fuzz: id %d out of range\n", id);
        std::abort();
      }
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  if (data[0] % 2 == 0) {
    Safetensors(data + 1, size - 1);
  } else {
    TokenizerJson(data + 1, size - 1);
  }
  return 0;
}
