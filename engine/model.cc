#include "engine/model.h"

#include <xxhash.h>

#include <filesystem>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
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

}  // namespace

absl::StatusOr<std::unique_ptr<Model>> Model::Load(const std::string& path) {
  std::unique_ptr<Model> model(new Model());
  absl::StatusOr<std::unique_ptr<GgufFile>> file = GgufFile::Open(path);
  if (!file.ok()) return file.status();
  model->file_ = std::move(*file);
  absl::StatusOr<ModelConfig> config = ReadModelConfig(*model->file_);
  if (!config.ok()) return config.status();
  model->config_ = std::move(*config);
  absl::StatusOr<ModelWeights> weights = LoadModelWeights(*model->file_, model->config_);
  if (!weights.ok()) return weights.status();
  model->weights_ = std::move(*weights);
  absl::StatusOr<Vocab> vocab = LoadVocab(*model->file_);
  if (!vocab.ok()) return vocab.status();
  absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer = Tokenizer::Create(std::move(*vocab));
  if (!tokenizer.ok()) return tokenizer.status();
  model->tokenizer_ = std::move(*tokenizer);
  model->fingerprint_ = Fingerprint(*model->file_, model->config_);
  model->file_->ReleaseMetadata();
  const std::filesystem::path file_path(path);
  model->id_ = file_path.extension() == ".gguf" ? file_path.stem().string()
                                                : file_path.filename().string();
  if (model->id_.empty()) model->id_ = model->config_.name;
  return model;
}

}  // namespace baton::engine
