// A Hugging Face checkpoint's tensors as the GGUF tensors llama.cpp's converter writes for the
// same model: the name map per architecture, and the few layouts that differ from GGUF's. A tensor
// whose bytes are GGUF's is a view of the mapped shard (dims reversed: GGUF's first dim is the
// contiguous one); the others are made at load:
//   - Gemma's norm weights: GGUF stores 1 + w (small f32 vectors).
//   - A mixture's experts one by one (transformers 4's layout, and DeepSeek's and Qwen's
//     published checkpoints): each a view named "blk.N.ffn_X_exps.<e>.weight", which the
//     engine stacks (model_weights.cc). transformers 5's fused experts, mlp.experts.gate_up_proj
//     [E, 2 * ff, hidden] and down_proj [E, hidden, ff]: per-expert views of the gate and up
//     halves, and down_proj as GGUF's stacked tensor.
//   - gpt-oss's experts, stored [E, in, out] with gate and up interleaved (gate_up_proj
//     [E, hidden, 2 * ff], even columns the gate) and their biases [E, 2 * ff] interleaved alike:
//     transposed and split (copies, in the stored type). Or, as OpenAI released them, MXFP4:
//     <proj>_blocks [E, out, in / 32, 16] bytes and <proj>_scales [E, out, in / 32], repacked
//     into GGUF's MXFP4 blocks (rows [out, in], so no transpose; gate and up rows split).
//   - DeepSeek's kv_b_proj [heads * (nope + value), kv_lora_rank]: GGUF's attn_k_b, each head's
//     K rows transposed [heads, kv_lora_rank, nope] (a copy), and attn_v_b, each head's V rows
//     (views "attn_v_b.<h>.weight").
// Tensors of layers at or past num_hidden_layers are DeepSeek's multi-token-prediction blocks,
// skipped (as transformers skips them); for another architecture such a tensor is an error.
//
// Thread-safety: a pure function of its arguments.
#ifndef BATON_ENGINE_HF_TENSOR_MAP_H_
#define BATON_ENGINE_HF_TENSOR_MAP_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/gguf_file.h"
#include "engine/hf_config.h"
#include "engine/mapped_file.h"
#include "engine/safetensors_file.h"
#include "nlohmann/json.hpp"

namespace baton::engine {

// One stored tensor of a checkpoint.
struct HfStoredTensor {
  const SafetensorsTensor* tensor;
  const MappedFile* mapping;  // its shard's
  std::string shard;          // the shard's file name
};

// One GGUF tensor made from a stored one.
struct HfMappedTensor {
  GgufTensorInfo info;  // info.data: a view inside from.mapping, or in a buffer made at load
  const HfStoredTensor* from;
  bool view;  // whether info.data lies inside from.mapping
};

// Buffers of the tensors made at load.
struct HfOwnedBuffers {
  std::vector<std::unique_ptr<uint8_t[]>> buffers;
  uint8_t* Allocate(uint64_t bytes);
  const uint8_t* Floats(const std::vector<float>& values);
};

// `stored` are the checkpoint's tensors, `config` what ReadHfConfig made of config.json (`json`).
// Errors name the tensor and its shard: a tensor no rule maps, one of a shape its rule cannot
// split, a layer past num_hidden_layers.
absl::StatusOr<std::vector<HfMappedTensor>> MapHfTensors(const std::vector<HfStoredTensor>& stored,
                                                         const HfConfig& config,
                                                         const nlohmann::json& json,
                                                         HfOwnedBuffers* owned);

}  // namespace baton::engine

#endif  // BATON_ENGINE_HF_TENSOR_MAP_H_
