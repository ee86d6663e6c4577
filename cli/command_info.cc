// baton info --model PATH: what a GGUF file holds, and the devices this machine can run it on.
#include <iostream>
#include <map>

#include "absl/strings/str_format.h"
#include "cli/command.h"
#include "engine/chat_template.h"
#include "engine/gguf_file.h"
#include "engine/hf_checkpoint.h"
#include "engine/model_config.h"
#include "engine/vocab.h"
#include "kernels/backend_factory.h"
#include "kernels/cpu/cpu_isa.h"

namespace baton::cli {

int RunInfo(const Args& args) {
  const std::vector<FlagSpec> specs = {
      {"model", "PATH", "GGUF file or Hugging Face checkpoint directory (default: the default model)"},
      {"metadata", "", "also list every metadata key"},
      {"help", "", "show this help"},
  };
  const std::string usage = Usage("info", "[--model PATH] [--metadata]", specs);
  absl::StatusOr<Flags> flags = Flags::Parse(args, specs);
  if (!flags.ok()) return UsageError("info", flags.status(), usage);
  if (flags->Has("help")) {
    std::cout << usage;
    return 0;
  }
  const std::string path = flags->GetOr("model", DefaultModelPath());
  // A checkpoint directory is shown as the GGUF model it is read as (engine/hf_checkpoint.h).
  const bool checkpoint = engine::IsHfCheckpointDir(path);
  std::unique_ptr<engine::GgufFile> file;
  absl::StatusOr<engine::Vocab> vocab;
  if (checkpoint) {
    absl::StatusOr<engine::HfCheckpoint> c = engine::OpenHfCheckpoint(path);
    if (!c.ok()) return RunError("info", c.status());
    file = std::move(c->file);
    vocab = std::move(c->vocab);
  } else {
    absl::StatusOr<std::unique_ptr<engine::GgufFile>> opened = engine::GgufFile::Open(path);
    if (!opened.ok()) return RunError("info", opened.status());
    file = *std::move(opened);
    vocab = engine::LoadVocab(*file);
  }
  const engine::GgufFile& f = *file;

  if (checkpoint) {
    std::cout << absl::StrFormat("checkpoint: %s (%d bytes of safetensors)\n", path, f.file_size());
  } else {
    std::cout << absl::StrFormat("file: %s (%d bytes, GGUF v%d, alignment %d)\n", path,
                                 f.file_size(), f.version(), f.alignment());
  }
  std::cout << "cpu kernels: " << kernels::CpuIsaName() << "\n";
  absl::StatusOr<std::vector<std::string>> gpus = kernels::DescribeGpus();
  if (!gpus.ok()) {
    std::cout << "gpus: none (" << gpus.status().message() << ")\n";
  } else {
    std::cout << "gpus: " << gpus->size() << "\n";
    for (const std::string& gpu : *gpus) std::cout << "  " << gpu << "\n";
  }
  if (f.tensors().empty()) {
    std::cout << "tensors: 0 (vocabulary only)\n";
  } else {
    absl::StatusOr<engine::ModelConfig> config = engine::ReadModelConfig(f);
    if (config.ok() && checkpoint) config->rope_neox = true;  // as Model::Load runs it
    if (!config.ok()) {
      std::cout << "model: " << config.status().message() << "\n";
    } else {
      const engine::ModelConfig& c = *config;
      std::cout << absl::StrFormat(
          "model: %s (%s)\n  layers %d, embedding %d, heads %d (kv %d), head dim %d, ffn %d\n"
          "  context %d, vocab %d, rope base %g dims %d %s, rms eps %g\n"
          "  KV cache: %d bytes per token (f16)\n",
          c.architecture, c.name, c.n_layer, c.n_embd, c.n_head, c.n_head_kv, c.head_dim, c.n_ff,
          c.n_ctx_train, c.n_vocab, c.rope_freq_base, c.rope_n_dims,
          c.rope_neox ? "neox" : "normal", c.rms_eps, c.kv_bytes_per_token());
      int local = 0;
      for (const engine::LayerSpec& l : c.layers) local += l.attention.window > 0 ? 1 : 0;
      if (local > 0) {
        std::cout << absl::StrFormat("  sliding window %d on %d of %d layers\n",
                                     c.layers[0].attention.window, local, c.n_layer);
      }
      if (const engine::ExpertsSpec& e = c.layers[0].feed_forward.experts; e.count > 0) {
        std::cout << absl::StrFormat("  experts %d (%d per token), expert ffn %d", e.count, e.used,
                                     e.n_ff)
                  << (e.n_ff_shared > 0 ? absl::StrFormat(", shared expert ffn %d", e.n_ff_shared)
                                        : "")
                  << "\n";
      }
    }
    std::map<std::string, std::pair<int, uint64_t>> by_type;
    uint64_t total_bytes = 0;
    uint64_t total_elements = 0;
    for (const engine::GgufTensorInfo& t : f.tensors()) {
      auto& [count, bytes] = by_type[std::string(kernels::DTypeName(t.dtype))];
      ++count;
      bytes += t.n_bytes;
      total_bytes += t.n_bytes;
      total_elements += t.n_elements;
    }
    std::cout << absl::StrFormat("tensors: %d, %d parameters, %d bytes\n", f.tensors().size(),
                                 total_elements, total_bytes);
    for (const auto& [type, count_bytes] : by_type) {
      std::cout << absl::StrFormat("  %-6s %4d tensors, %d bytes\n", type, count_bytes.first,
                                   count_bytes.second);
    }
  }
  if (!vocab.ok()) {
    std::cout << "tokenizer: " << vocab.status().message() << "\n";
  } else {
    const engine::Vocab& v = *vocab;
    std::cout << absl::StrFormat(
        "tokenizer: %s, pre '%s', %d tokens, %d merges, bos %d, eos %d, add_bos %s\n",
        v.model == engine::TokenizerModel::kBytePairGpt2    ? "byte-level BPE (gpt2)"
        : v.model == engine::TokenizerModel::kBytePairChars ? "BPE with byte fallback"
                                                            : "SentencePiece BPE (llama)",
        v.pre, v.size(), v.merges.size(), v.bos_id, v.eos_id, v.add_bos ? "true" : "false");
    if (v.chat_template.empty()) {
      std::cout << "chat template: none\n";
    } else {
      absl::StatusOr<engine::ChatTemplate> compiled = engine::ChatTemplate::Compile(
          v.chat_template, /*bos_token=*/"", /*eos_token=*/"");
      std::cout << absl::StrFormat("chat template: %d bytes, %s\n", v.chat_template.size(),
                                   compiled.ok() ? "parses" : compiled.status().message());
    }
  }
  if (flags->Has("metadata")) {
    std::cout << "metadata:\n";
    for (const auto& [key, value] : f.metadata()) {
      std::cout << "  " << key << " = " << value.DebugString() << "\n";
    }
  }
  return 0;
}

}  // namespace baton::cli
