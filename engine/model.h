// A loaded model: the mapped GGUF file (or Hugging Face checkpoint seen as one, hf_checkpoint.h),
// its config, weights and tokenizer, together.
//
// Thread-safety: immutable after Load(); share it freely between threads.
#ifndef BATON_ENGINE_MODEL_H_
#define BATON_ENGINE_MODEL_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "engine/gguf_file.h"
#include "engine/load_options.h"
#include "engine/model_config.h"
#include "engine/model_weights.h"
#include "engine/tokenizer.h"

namespace baton::engine {

class Model {
 public:
  // Opens and validates the model at `path` (a GGUF file, or a Hugging Face checkpoint
  // directory), its hyperparameters, every weight and the tokenizer.
  static absl::StatusOr<std::unique_ptr<Model>> Load(const std::string& path,
                                                     const LoadOptions& options = {});

  // The mapping and its tensors; the parsed metadata has been released (config() and
  // tokenizer() hold what was read from it).
  const GgufFile& file() const { return *file_; }
  const ModelConfig& config() const { return config_; }
  const ModelWeights& weights() const { return weights_; }  // empty without LoadOptions::weights
  const Tokenizer& tokenizer() const { return *tokenizer_; }
  // Identifies the exact weights and the KV blocks' layout: a 128-bit hash (hex) of the file's
  // size, config and tensor directory and of kernels::kKvBlockLayoutName (cheap: reads no tensor
  // data). Workers compare it before exchanging KV.
  const std::string& fingerprint() const { return fingerprint_; }
  // What clients and metrics call the model: the file's name without ".gguf", or the checkpoint
  // directory's name (general.name when that is empty). The router and the workers name it
  // alike.
  const std::string& id() const { return id_; }

 private:
  Model() = default;
  std::unique_ptr<GgufFile> file_;
  ModelConfig config_;
  ModelWeights weights_;
  std::unique_ptr<Tokenizer> tokenizer_;
  std::string fingerprint_;
  std::string id_;
};

}  // namespace baton::engine

#endif  // BATON_ENGINE_MODEL_H_
