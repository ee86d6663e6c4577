#include "engine/hf_checkpoint.h"

#include <cstring>
#include <filesystem>
#include <set>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "engine/hf_config.h"
#include "engine/hf_tensor_map.h"
#include "engine/json_file.h"
#include "engine/safetensors_file.h"
#include "engine/tokenizer_json.h"
#include "kernels/cpu/dequantize.h"
#include "kernels/cpu/quantize.h"
#include "nlohmann/json.hpp"

namespace baton::engine {
namespace {

using Json = nlohmann::json;
namespace fs = std::filesystem;

// The shard files: model.safetensors.index.json's weight_map values, else model.safetensors.
absl::StatusOr<std::vector<fs::path>> ShardPaths(const fs::path& dir) {
  const fs::path index = dir / "model.safetensors.index.json";
  if (!fs::exists(index)) {
    if (!fs::exists(dir / "model.safetensors")) {
      return absl::NotFoundError(absl::StrCat(
          dir.string(), ": neither model.safetensors nor model.safetensors.index.json"));
    }
    return std::vector<fs::path>{dir / "model.safetensors"};
  }
  absl::StatusOr<Json> json = ReadJsonObjectFile(index.string());
  if (!json.ok()) return json.status();
  const Json& map = json->value("weight_map", Json());
  if (!map.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(index.string(), ": weight_map: not an object"));
  }
  std::set<std::string> names;
  for (const auto& [tensor, shard] : map.items()) {
    if (!shard.is_string() || shard.get<std::string>().find('/') != std::string::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat(index.string(), ": weight_map: '", tensor, "': not a file name"));
    }
    names.insert(shard.get<std::string>());
  }
  std::vector<fs::path> paths;
  for (const std::string& name : names) {
    if (!fs::exists(dir / name)) {
      return absl::NotFoundError(absl::StrCat(index.string(), ": weight_map names shard '", name,
                                              "', which is not in ", dir.string()));
    }
    paths.push_back(dir / name);
  }
  return paths;
}

bool IsMatrix(const GgufTensorInfo& info) {
  return info.dims.size() >= 2 && info.n_elements > 0 && absl::EndsWith(info.name, ".weight") &&
         !absl::EndsWith(info.name, "norm.weight");
}

// The matrix `t` re-stored as `dtype` row by row (its dims[0] a multiple of the type's block);
// only its type and size when `describe_only`. A view's stored pages go once read.
void Quantize(kernels::DType dtype, bool describe_only, HfMappedTensor* t, HfOwnedBuffers* owned) {
  GgufTensorInfo& info = t->info;
  const int64_t cols = info.dims[0], rows = static_cast<int64_t>(info.n_elements) / cols;
  const int64_t row_bytes = kernels::RowBytes(dtype, cols);
  const kernels::DType from = info.dtype;
  const uint8_t* data = info.data;
  info.dtype = dtype;
  info.n_bytes = rows * row_bytes;
  info.offset_in_data = 0;
  if (describe_only) {
    info.data = nullptr;
    return;
  }
  uint8_t* buffer = owned->Allocate(rows * row_bytes);
  std::vector<float> row(cols);
  const int64_t in_row_bytes = kernels::RowBytes(from, cols);
  for (int64_t r = 0; r < rows; ++r) {
    kernels::DequantizeRow(from, data + r * in_row_bytes, row.data(), cols);
    kernels::QuantizeRow(dtype, row.data(), cols, buffer + r * row_bytes);
  }
  info.data = buffer;
  if (t->view) t->from->mapping->DropResidentPages(data, rows * in_row_bytes);
}

// The shards' tensors, in order (their mappings into `mappings`, which the file keeps).
absl::StatusOr<std::vector<HfStoredTensor>> OpenShards(
    const std::vector<fs::path>& shards, std::vector<std::unique_ptr<SafetensorsFile>>* files,
    uint64_t* size) {
  std::vector<HfStoredTensor> stored;
  for (const fs::path& shard : shards) {
    absl::StatusOr<std::unique_ptr<SafetensorsFile>> file = SafetensorsFile::Open(shard.string());
    if (!file.ok()) return file.status();
    *size += (*file)->size();
    for (const SafetensorsTensor& t : (*file)->tensors()) {
      stored.push_back({.tensor = &t, .mapping = &(*file)->mapping(), .shard = shard.string()});
    }
    files->push_back(*std::move(file));
  }
  return stored;
}

// OpenHfCheckpoint's work; nlohmann may throw where a field has an unexpected type.
absl::StatusOr<HfCheckpoint> ReadCheckpoint(const std::string& dir_name,
                                            const LoadOptions& options) {
  const fs::path dir(dir_name);
  const std::string config_file = (dir / "config.json").string();
  absl::StatusOr<Json> json = ReadJsonObjectFile(config_file);
  if (!json.ok()) return json.status();
  absl::StatusOr<HfConfig> config = ReadHfConfig(*json, config_file, dir.filename().string());
  if (!config.ok()) return config.status();
  if (options.quantize && !kernels::CanQuantize(*options.quantize)) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot quantize to ", std::string(kernels::DTypeName(*options.quantize))));
  }
  absl::StatusOr<std::vector<fs::path>> shards = ShardPaths(dir);
  if (!shards.ok()) return shards.status();
  std::vector<std::unique_ptr<SafetensorsFile>> files;
  uint64_t size = 0;
  absl::StatusOr<std::vector<HfStoredTensor>> stored = OpenShards(*shards, &files, &size);
  if (!stored.ok()) return stored.status();
  HfOwnedBuffers owned;
  absl::StatusOr<std::vector<HfMappedTensor>> mapped =
      MapHfTensors(*stored, *config, *json, &owned);
  if (!mapped.ok()) return mapped.status();

  HfCheckpoint checkpoint;
  std::vector<GgufTensorInfo> tensors;
  for (HfMappedTensor& t : *mapped) {
    if (checkpoint.sources.contains(t.info.name)) {
      return absl::InvalidArgumentError(absl::StrCat(t.from->shard, ": tensor '",
                                                     t.from->tensor->name, "' gives ", t.info.name,
                                                     ", which another also gives"));
    }
    if (options.quantize && IsMatrix(t.info) && *options.quantize != t.info.dtype &&
        t.info.dims[0] % kernels::Traits(*options.quantize).block_size == 0) {
      Quantize(*options.quantize, !options.weights, &t, &owned);
    }
    checkpoint.sources[t.info.name] =
        absl::StrCat(t.from->tensor->name, " in ", fs::path(t.from->shard).filename().string());
    tensors.push_back(std::move(t.info));
  }
  if (!config->rope_freq_factors.empty()) {
    const int64_t n = static_cast<int64_t>(config->rope_freq_factors.size());
    tensors.push_back({.name = "rope_freqs.weight",
                       .dims = {n},
                       .dtype = kernels::DType::kF32,
                       .offset_in_data = 0,
                       .offset_in_file = 0,
                       .n_elements = uint64_t(n),
                       .n_bytes = uint64_t(n) * 4,
                       .data = owned.Floats(config->rope_freq_factors)});
  }
  absl::StatusOr<Vocab> vocab = LoadTokenizerJson(dir.string());
  if (!vocab.ok()) return vocab.status();
  checkpoint.vocab = *std::move(vocab);
  checkpoint.rope_neox = config->rope_neox;
  // The tensors view the mappings, which the assembled file keeps.
  std::vector<std::shared_ptr<const MappedFile>> mappings;
  for (std::unique_ptr<SafetensorsFile>& file : files) {
    std::shared_ptr<SafetensorsFile> shared = std::move(file);
    mappings.push_back(std::shared_ptr<const MappedFile>(shared, &shared->mapping()));
  }
  checkpoint.file =
      GgufFile::Assemble(dir.string(), size, std::move(config->metadata), std::move(tensors),
                         std::move(mappings), std::move(owned.buffers));
  return checkpoint;
}

}  // namespace

bool IsHfCheckpointDir(const std::string& path) {
  std::error_code ec;
  return fs::is_directory(path, ec) && fs::exists(fs::path(path) / "config.json", ec);
}

absl::StatusOr<HfCheckpoint> OpenHfCheckpoint(const std::string& dir, const LoadOptions& options) {
  try {
    return ReadCheckpoint(dir, options);
  } catch (const nlohmann::json::exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat(dir, ": a field of an unexpected type in its JSON files: ", e.what()));
  }
}

}  // namespace baton::engine
