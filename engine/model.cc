#include "engine/model.h"

#include <xxhash.h>

#include <filesystem>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "engine/hf_checkpoint.h"
#include "kernels/kv_block_layout.h"

namespace baton::engine {
namespace {

std::string Fingerprint(const GgufFile& file, const ModelConfig& config) {
  // A 128-bit hash of the directory, stable across processes and machines; no tensor byte is read.
  // The KV blocks' layout is part of it: a build that lays blocks out otherwise serves another
  // fingerprint, so the router and the decode workers refuse to mix the two.
  std::string directory = absl::StrCat(file.file_size(), "|", config.architecture, "|",
                                       config.n_layer, "|", config.n_embd, "|", config.n_vocab,
                                       "|kv:", kernels::kKvBlockLayoutName);
  for (const GgufTensorInfo& t : file.tensors()) {
    absl::StrAppend(&directory, "|", t.name, ":", static_cast<int>(t.dtype), ":",
                    t.offset_in_data, ":", t.n_bytes);
  }
  const XXH128_hash_t h = XXH3_128bits(directory.data(), directory.size());
  return absl::StrFormat("%016x%016x", h.high64, h.low64);
}

// What Load reads a model from: a GGUF file, or a Hugging Face checkpoint seen as one.
struct ModelSource {
  std::unique_ptr<GgufFile> file;
  Vocab vocab;
  bool rope_neox = false;  // the checkpoint's Q/K rows call for NeoX-style RoPE
  absl::flat_hash_map<std::string, std::string> tensor_sources;  // GGUF name -> where it came from
};

absl::StatusOr<ModelSource> OpenModelSource(const std::string& path, const LoadOptions& options) {
  ModelSource source;
  if (IsHfCheckpointDir(path)) {
    absl::StatusOr<HfCheckpoint> checkpoint =
        OpenHfCheckpoint(path, options);
    if (!checkpoint.ok()) return checkpoint.status();
    source.file = std::move(checkpoint->file);
    source.vocab = std::move(checkpoint->vocab);
    source.rope_neox = checkpoint->rope_neox;
    source.tensor_sources = std::move(checkpoint->sources);
    return source;
  }
  if (options.quantize) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": quantizing at load takes a Hugging Face checkpoint directory; a "
                           "GGUF file is quantized already (llama-quantize re-quantizes one)"));
  }
  absl::StatusOr<std::unique_ptr<GgufFile>> file = GgufFile::Open(path);
  if (!file.ok()) return file.status();
  source.file = std::move(*file);
  absl::StatusOr<Vocab> vocab = LoadVocab(*source.file);
  if (!vocab.ok()) return vocab.status();
  source.vocab = std::move(*vocab);
  return source;
}

// `status` with the checkpoint tensor its message names, where the model came from a checkpoint
// (its config.json and tensors disagree).
absl::Status WithTensorSource(const absl::Status& status,
                              const absl::flat_hash_map<std::string, std::string>& sources) {
  for (const auto& [name, source] : sources) {
    if (absl::StrContains(status.message(), absl::StrCat("'", name, "'"))) {
      return absl::Status(status.code(),
                          absl::StrCat(status.message(), " (", source,
                                       "; does config.json describe these tensors?)"));
    }
  }
  return status;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Model>> Model::Load(const std::string& path,
                                                   const LoadOptions& options) {
  std::unique_ptr<Model> model(new Model());
  absl::StatusOr<ModelSource> source = OpenModelSource(path, options);
  if (!source.ok()) return source.status();
  model->file_ = std::move(source->file);
  absl::StatusOr<ModelConfig> config = ReadModelConfig(*model->file_);
  if (!config.ok()) return config.status();
  model->config_ = std::move(*config);
  if (source->rope_neox) model->config_.rope_neox = true;
  if (options.weights) {
    absl::StatusOr<ModelWeights> weights = LoadModelWeights(*model->file_, model->config_);
    if (!weights.ok()) return WithTensorSource(weights.status(), source->tensor_sources);
    model->weights_ = std::move(*weights);
  }
  absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer = Tokenizer::Create(std::move(source->vocab));
  if (!tokenizer.ok()) return tokenizer.status();
  // Every id the tokenizer gives must have an embedding row (a checkpoint may have more rows).
  if ((*tokenizer)->vocab().size() > model->config_.n_vocab) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": the tokenizer has ", (*tokenizer)->vocab().size(),
        " tokens but the model's embeddings only ", model->config_.n_vocab, " rows (vocab_size)"));
  }
  model->tokenizer_ = std::move(*tokenizer);
  model->fingerprint_ = Fingerprint(*model->file_, model->config_);
  model->file_->ReleaseMetadata();
  const std::filesystem::path file_path(path);
  model->id_ = file_path.extension() == ".gguf" ? file_path.stem().string()
                                                : file_path.filename().string();
  if (model->id_.empty()) model->id_ = file_path.parent_path().filename().string();  // "dir/"
  if (model->id_.empty()) model->id_ = model->config_.name;
  return model;
}

}  // namespace baton::engine
