// How a model is loaded (Model::Load, OpenHfCheckpoint).
//
// Thread-safety: a plain value type.
#ifndef BATON_ENGINE_LOAD_OPTIONS_H_
#define BATON_ENGINE_LOAD_OPTIONS_H_

#include <optional>

#include "kernels/dtype.h"

namespace baton::engine {

struct LoadOptions {
  // Quantize a Hugging Face checkpoint's matrices into this type at load (those whose rows fit
  // the type's blocks; kernels::CanQuantize, round to nearest); an error for a GGUF file.
  std::optional<kernels::DType> quantize;
  // false: the config, tokenizer, fingerprint and id only, for a process that never runs the
  // model (the router): no weights are loaded and nothing is quantized (a quantized tensor is
  // described, type and size, with no data), so the fingerprint is the loaded model's all the
  // same.
  bool weights = true;
};

}  // namespace baton::engine

#endif  // BATON_ENGINE_LOAD_OPTIONS_H_
