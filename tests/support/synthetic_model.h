// Tiny Llama-architecture models with random weights, written as real GGUF files: the engine's unit
// tests run on them (fast, deterministic from a seed), the real model only in agreement tests.
//
// The vocabulary is byte-level BPE ("gpt2" model, "gpt-2" pre-tokenizer): the 256 byte tokens,
// a few merges, then <|endoftext|> (BOS/EOS, control).
#ifndef BATON_TESTS_SUPPORT_SYNTHETIC_MODEL_H_
#define BATON_TESTS_SUPPORT_SYNTHETIC_MODEL_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "kernels/dtype.h"

namespace baton::test_support {

struct SyntheticModelOptions {
  uint64_t seed = 1;
  std::string architecture = "llama";  // "llama" or "qwen2" (adds QKV biases, NeoX RoPE)
  int32_t n_layer = 2;
  int32_t n_embd = 64;
  int32_t n_head = 4;
  int32_t n_head_kv = 2;
  int32_t n_ff = 96;
  int32_t n_ctx = 256;
  kernels::DType weight_dtype = kernels::DType::kF32;  // F32, F16, BF16 or Q8_0
  bool tied_output = true;
};

// Writes the model to `path`.
absl::Status WriteSyntheticModel(const std::string& path, const SyntheticModelOptions& options);

// The path of `name` in this test process's own temporary directory (under $TEST_TMPDIR, else the
// system's), which is removed with its contents when the process exits. Thread-safe.
std::string TempPath(const std::string& name);

}  // namespace baton::test_support

#endif  // BATON_TESTS_SUPPORT_SYNTHETIC_MODEL_H_
