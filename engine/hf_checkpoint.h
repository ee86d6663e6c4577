// A Hugging Face checkpoint directory (config.json, tokenizer.json, tokenizer_config.json, and
// model.safetensors or the shards that model.safetensors.index.json lists), seen as the GGUF
// model the engine reads: config.json's hyperparameters become the GGUF keys llama.cpp's
// converter writes (hf_config.h, which lists the architectures), and each tensor a GGUF-named
// view of the mapped safetensors, or where the layouts differ a tensor made at load
// (hf_tensor_map.h). Hugging Face keeps each head's Q and K rows in the order NeoX-style RoPE
// rotates (two halves), where llama.cpp's converter permutes llama's rows for the interleaved
// style: such a checkpoint runs with NeoX-style RoPE (`rope_neox`), which computes the same thing
// without a copy. With options.quantize, the matrices are re-stored in that type at load.
//
// Errors name the file and the field or tensor: a missing shard, a tensor no rule maps, a
// config.json value out of range or absent, an architecture not run.
//
// Thread-safety: a pure function of the files.
#ifndef BATON_ENGINE_HF_CHECKPOINT_H_
#define BATON_ENGINE_HF_CHECKPOINT_H_

#include <memory>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "engine/gguf_file.h"
#include "engine/load_options.h"
#include "engine/vocab.h"

namespace baton::engine {

struct HfCheckpoint {
  std::unique_ptr<GgufFile> file;  // path() is the directory
  Vocab vocab;                     // tokenizer.json's
  bool rope_neox = false;          // run RoPE NeoX-style whatever the architecture's default
  // GGUF tensor name -> "<Hugging Face name> in <shard file>", for error messages.
  absl::flat_hash_map<std::string, std::string> sources;
};

// Whether `path` is a directory with a config.json.
bool IsHfCheckpointDir(const std::string& path);

absl::StatusOr<HfCheckpoint> OpenHfCheckpoint(const std::string& dir,
                                              const LoadOptions& options = {});

}  // namespace baton::engine

#endif  // BATON_ENGINE_HF_CHECKPOINT_H_
