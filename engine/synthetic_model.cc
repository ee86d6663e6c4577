#include "engine/synthetic_model.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/gguf_writer.h"
#include "kernels/cpu/dequantize.h"
#include "kernels/cpu/quantize.h"

namespace baton::engine {
namespace {

using kernels::DType;

// GPT-2's byte -> printable code point map, as UTF-8 token text.
std::string ByteToken(int b) {
  int cp;
  if ((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255)) {
    cp = b;
  } else {
    int n = 0;
    for (int x = 0; x < b; ++x) {
      if (!((x >= 33 && x <= 126) || (x >= 161 && x <= 172) || (x >= 174 && x <= 255))) ++n;
    }
    cp = 256 + n;
  }
  std::string out;
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return out;
}

// The byte tokens, the merged tokens of `merges`, <|endoftext|>, then fillers up to n_vocab.
std::vector<std::string> VocabularyTokens(const std::vector<std::string>& merges,
                                          int32_t n_vocab) {
  std::vector<std::string> tokens;
  for (int b = 0; b < 256; ++b) tokens.push_back(ByteToken(b));
  for (const std::string& m : merges) {
    std::string merged = m;
    merged.erase(merged.find(' '), 1);
    tokens.push_back(merged);
  }
  tokens.push_back("<|endoftext|>");
  for (int32_t i = static_cast<int32_t>(tokens.size()); i < n_vocab; ++i) {
    tokens.push_back(absl::StrCat("<|unused_", i, "|>"));
  }
  return tokens;
}

// The 32-value-block type llama-quantize gives a K-quant matrix whose rows do not fit 256.
DType KQuantFallback(DType dtype) {
  switch (dtype) {
    case DType::kQ2_K:
    case DType::kQ3_K:
      return DType::kQ4_0;
    case DType::kQ4_K:
      return DType::kQ5_0;
    case DType::kQ5_K:
      return DType::kQ5_1;
    case DType::kQ6_K:
      return DType::kQ8_0;
    default:
      return dtype;
  }
}

int32_t HeadDim(const SyntheticModelOptions& o) {
  return o.head_dim > 0 ? o.head_dim : o.n_embd / o.n_head;
}
int32_t ExpertFf(const SyntheticModelOptions& o) {
  return o.n_ff_expert > 0 ? o.n_ff_expert : o.n_ff;
}
int32_t SharedFf(const SyntheticModelOptions& o) {
  return o.n_ff_shared > 0 ? o.n_ff_shared : o.n_ff;
}

absl::Status Validate(const SyntheticModelOptions& o) {
  if (!kernels::CanQuantize(o.weight_dtype)) {
    return absl::InvalidArgumentError(
        absl::StrCat("synthetic model: no encoder for weight type ",
                     std::string(kernels::DTypeName(o.weight_dtype))));
  }
  const std::string& a = o.architecture;
  if (a != "llama" && a != "qwen2" && a != "qwen3" && a != "gemma3" && a != "qwen3moe" &&
      a != "qwen2moe" && a != "gpt-oss" && a != "deepseek2") {
    return absl::InvalidArgumentError(absl::StrCat(
        "synthetic model: architecture '", a,
        "' is none of llama, qwen2, qwen3, gemma3, qwen3moe, qwen2moe, gpt-oss, deepseek2"));
  }
  if (a == "deepseek2" &&
      (o.kv_lora_rank <= 0 || o.qk_nope_dim <= 0 || o.qk_rope_dim <= 0 || o.qk_rope_dim % 2 ||
       o.v_head_dim <= 0 || o.n_head_kv != 1 || HeadDim(o) != o.kv_lora_rank + o.qk_rope_dim)) {
    return absl::InvalidArgumentError(
        "synthetic model: deepseek2 needs kv_lora_rank, qk_nope_dim, an even qk_rope_dim and "
        "v_head_dim, one kv head and head_dim kv_lora_rank + qk_rope_dim");
  }
  const bool moe_architecture =
      a == "qwen3moe" || a == "qwen2moe" || a == "gpt-oss" || a == "deepseek2";
  if ((moe_architecture && o.n_expert == 0) ||
      (o.n_expert > 0 && !moe_architecture && a != "llama") || o.n_expert_used > o.n_expert || (o.n_expert > 0 && o.n_expert_used < 1) ||
      ExpertFf(o) % 32 != 0 || SharedFf(o) % 32 != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "synthetic model: experts ", o.n_expert, " (used ", o.n_expert_used, ", ff ",
        ExpertFf(o), ", shared ff ", SharedFf(o), ") for ", a,
        ": qwen3moe, qwen2moe and gpt-oss need experts, llama may have them; 1 <= used <= "
        "experts; ff "
        "multiples of 32"));
  }
  if (o.sliding_window > 0 && a != "llama" && a != "gemma3" && a != "gpt-oss") {
    return absl::InvalidArgumentError(absl::StrCat(
        "synthetic model: a sliding window is for llama, gemma3 and gpt-oss, not ", a));
  }
  if (a == "gpt-oss" && o.sliding_window == 0) {
    return absl::InvalidArgumentError("synthetic model: gpt-oss needs a sliding window");
  }
  if (o.n_layer < 1 || o.n_head < 1 || o.n_head_kv < 1 || o.n_embd < 1 || o.n_ff < 1 ||
      o.n_ctx < 1 || (o.head_dim == 0 && o.n_embd % o.n_head != 0) || o.head_dim < 0 ||
      o.head_dim % 2 != 0 || o.n_head % o.n_head_kv != 0 || o.n_embd % 32 != 0 ||
      o.n_ff % 32 != 0 || o.n_head * HeadDim(o) % 32 != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "synthetic model: bad shape (layers ", o.n_layer, ", embd ", o.n_embd, ", heads ",
        o.n_head, "/", o.n_head_kv, ", ff ", o.n_ff, ", ctx ", o.n_ctx,
        ", head dim ", o.head_dim, "): all positive, embd, ff and heads x head dim multiples of "
        "32, heads dividing embd (or an even head dim), kv heads dividing heads"));
  }
  return absl::OkStatus();
}

}  // namespace

DType SyntheticTensorType(const SyntheticModelOptions& options, std::string_view tensor,
                          int64_t n_cols) {
  DType dtype = options.weight_dtype;
  if (options.mix == SyntheticMix::kQ4_K_M) {
    const std::string name(tensor);
    const bool more_bits = absl::StrContains(name, "attn_v.") ||
                           absl::StrContains(name, "ffn_down.") || name == "output.weight";
    dtype = more_bits ? DType::kQ6_K : DType::kQ4_K;
  }
  if (n_cols % kernels::Traits(dtype).block_size == 0) return dtype;
  dtype = KQuantFallback(dtype);
  // Rows no 32-value block fits stay F16, as llama-quantize keeps them.
  return n_cols % kernels::Traits(dtype).block_size == 0 ? dtype : DType::kF16;
}

// Matrices this large (a real model's, for benchmarks) are drawn on every core: rows in fixed
// chunks, each chunk from its own generator seeded by `seed` and its index, so the bytes do not
// depend on the number of cores. Smaller ones (the tests') come from the model's one generator.
constexpr int64_t kParallelElements = int64_t{1} << 24;

void EncodeRandomRowsInParallel(DType dtype, int64_t rows, int64_t cols, float scale,
                                uint64_t seed, uint8_t* out) {
  constexpr int64_t kChunkRows = 256;
  const int64_t row_bytes = kernels::RowBytes(dtype, cols);
  const int64_t n_chunks = (rows + kChunkRows - 1) / kChunkRows;
  std::atomic<int64_t> next_chunk{0};
  auto work = [&] {
    std::vector<float> row(static_cast<size_t>(cols));
    for (int64_t c = next_chunk++; c < n_chunks; c = next_chunk++) {
      std::mt19937_64 chunk_rng(seed ^ (0x9e3779b97f4a7c15ull * static_cast<uint64_t>(c + 1)));
      std::normal_distribution<float> normal(0.0f, 1.0f);
      for (int64_t r = c * kChunkRows; r < std::min(rows, (c + 1) * kChunkRows); ++r) {
        for (float& x : row) x = normal(chunk_rng) * scale;
        kernels::QuantizeRow(dtype, row.data(), cols, out + r * row_bytes);
      }
    }
  };
  const int n_threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  std::vector<std::thread> threads;
  for (int t = 1; t < n_threads; ++t) threads.emplace_back(work);
  work();
  for (std::thread& t : threads) t.join();
}

absl::Status WriteSyntheticModel(const std::string& path, const SyntheticModelOptions& o) {
  if (absl::Status valid = Validate(o); !valid.ok()) return valid;
  std::mt19937_64 rng(o.seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  GgufWriter w;
  const std::string& a = o.architecture;
  w.AddString("general.architecture", a);
  w.AddString("general.name", "baton synthetic");
  w.AddUint32(a + ".block_count", o.n_layer);
  w.AddUint32(a + ".context_length", o.n_ctx);
  w.AddUint32(a + ".embedding_length", o.n_embd);
  w.AddUint32(a + ".feed_forward_length", o.n_ff);
  w.AddUint32(a + ".attention.head_count", o.n_head);
  w.AddUint32(a + ".attention.head_count_kv", o.n_head_kv);
  w.AddFloat32(a + ".rope.freq_base", o.rope_freq_base);
  w.AddFloat32(a + ".attention.layer_norm_rms_epsilon", 1e-5f);
  const int32_t head_dim = HeadDim(o);
  const bool deepseek2 = a == "deepseek2";
  if (o.head_dim > 0) {
    w.AddUint32(a + ".attention.key_length", head_dim);
    w.AddUint32(a + ".attention.value_length", deepseek2 ? o.kv_lora_rank : head_dim);
  }
  if (deepseek2) {
    w.AddUint32(a + ".attention.kv_lora_rank", o.kv_lora_rank);
    w.AddUint32(a + ".attention.q_lora_rank", o.q_lora_rank);
    w.AddUint32(a + ".attention.key_length_mla", o.qk_nope_dim + o.qk_rope_dim);
    w.AddUint32(a + ".attention.value_length_mla", o.v_head_dim);
    w.AddUint32(a + ".rope.dimension_count", o.qk_rope_dim);
    w.AddUint32(a + ".leading_dense_block_count", o.leading_dense);
    w.AddUint32(a + ".expert_shared_count", o.n_expert_shared);
    w.AddUint32(a + ".expert_gating_func", o.sigmoid_gating ? 2 : 1);
    w.AddBool(a + ".expert_weights_norm", o.expert_weights_norm);
    // As the converter writes it (routed_scaling_factor), 1 for none; ik_llama.cpp wants it.
    w.AddFloat32(a + ".expert_weights_scale",
                 o.expert_weights_scale > 0.0f ? o.expert_weights_scale : 1.0f);
    if (o.expert_groups > 0) {
      w.AddUint32(a + ".expert_group_count", o.expert_groups);
      w.AddUint32(a + ".expert_group_used_count", o.expert_groups_used);
    }
  }
  if (o.rope_yarn_log_multiplier > 0.0f) {
    w.AddFloat32(a + ".rope.scaling.yarn_log_multiplier", o.rope_yarn_log_multiplier);
  }
  if (o.sliding_window > 0) w.AddUint32(a + ".attention.sliding_window", o.sliding_window);
  if (o.rope_yarn_factor > 0.0f) {
    w.AddString(a + ".rope.scaling.type", "yarn");
    w.AddFloat32(a + ".rope.scaling.factor", o.rope_yarn_factor);
    w.AddUint32(a + ".rope.scaling.original_context_length",
                static_cast<uint32_t>(static_cast<float>(o.n_ctx) / o.rope_yarn_factor));
  }
  if (o.n_expert > 0) {
    w.AddUint32(a + ".expert_count", o.n_expert);
    w.AddUint32(a + ".expert_used_count", o.n_expert_used);
    if (a != "llama") w.AddUint32(a + ".expert_feed_forward_length", ExpertFf(o));
    if (a == "qwen2moe") w.AddUint32(a + ".expert_shared_feed_forward_length", SharedFf(o));
  }

  const std::vector<std::string> merges = {"Ġ t", "h e", "Ġt he", "i n", "a n"};
  const std::vector<std::string> tokens = VocabularyTokens(merges, o.n_vocab);
  const int32_t n_vocab = static_cast<int32_t>(tokens.size());
  if (o.n_vocab != 0 && o.n_vocab != n_vocab) {
    return absl::InvalidArgumentError(absl::StrCat("synthetic model: n_vocab ", o.n_vocab,
                                                   " is below the ", n_vocab,
                                                   " tokens of the byte-level vocabulary"));
  }
  const int32_t eot = 256 + static_cast<int32_t>(merges.size());
  std::vector<int32_t> types(n_vocab, 1);  // normal
  types[eot] = 3;                          // control
  for (int32_t i = eot + 1; i < n_vocab; ++i) types[i] = 5;  // unused
  w.AddString("tokenizer.ggml.model", "gpt2");
  w.AddString("tokenizer.ggml.pre", "gpt-2");
  w.AddStringArray("tokenizer.ggml.tokens", tokens);
  w.AddInt32Array("tokenizer.ggml.token_type", types);
  w.AddStringArray("tokenizer.ggml.merges", merges);
  w.AddUint32("tokenizer.ggml.bos_token_id", eot);
  w.AddUint32("tokenizer.ggml.eos_token_id", eot);
  w.AddBool("tokenizer.ggml.add_bos_token", false);

  auto random = [&](size_t n, float scale) {
    std::vector<float> v(n);
    for (float& x : v) x = normal(rng) * scale;
    return v;
  };
  auto norm = [&](size_t n) {
    std::vector<float> v(n);
    for (float& x : v) x = 1.0f + 0.1f * normal(rng);
    return v;
  };
  // Rows drawn and encoded one at a time (a large model's matrices are never all f32 at once).
  // One matrix [rows, cols] as the tensor {cols, rows} (count 0), or a layer's `count` experts'
  // as one tensor {cols, rows, count}.
  auto stacked = [&](const std::string& name, int64_t rows, int64_t cols,
                     int64_t count) -> absl::Status {
    const DType dtype = SyntheticTensorType(o, name, cols);
    const int64_t row_bytes = kernels::RowBytes(dtype, cols);
    const int64_t all_rows = std::max<int64_t>(count, 1) * rows;
    std::string data(static_cast<size_t>(all_rows * row_bytes), '\0');
    const float scale = 1.0f / std::sqrt(static_cast<float>(cols));
    auto* out = reinterpret_cast<uint8_t*>(data.data());
    if (all_rows * cols >= kParallelElements) {
      EncodeRandomRowsInParallel(dtype, all_rows, cols, scale, rng(), out);
    } else {
      for (int64_t r = 0; r < all_rows; ++r) {
        const std::vector<float> row = random(static_cast<size_t>(cols), scale);
        kernels::QuantizeRow(dtype, row.data(), cols, out + r * row_bytes);
      }
    }
    std::vector<int64_t> dims = {cols, rows};
    if (count > 0) dims.push_back(count);
    return w.AddTensor(name, dtype, dims, data);
  };
  auto matrix = [&](const std::string& name, int64_t rows, int64_t cols) {
    return stacked(name, rows, cols, 0);
  };
  auto experts = [&](const std::string& name, int64_t rows, int64_t cols) {
    return stacked(name, rows, cols, o.n_expert);
  };
  const int32_t q_dim = head_dim * o.n_head;
  const int32_t kv_dim = head_dim * o.n_head_kv;
  const bool qk_norm = a == "qwen3" || a == "qwen3moe" || a == "gemma3";
  const bool gpt_oss = a == "gpt-oss";
  const bool qkv_bias = a == "qwen2" || a == "qwen2moe" || gpt_oss;
  const bool post_norms = a == "gemma3";
  // deepseek2's latent attention (blk.N. is p).
  auto latent_attention = [&](const std::string& p) {
    const int32_t q_head = o.qk_nope_dim + o.qk_rope_dim;
    absl::Status s;
    if (o.q_lora_rank > 0) {
      s = matrix(p + "attn_q_a.weight", o.q_lora_rank, o.n_embd);
      if (s.ok()) {
        s = w.AddTensorF32(p + "attn_q_a_norm.weight", {o.q_lora_rank}, norm(o.q_lora_rank));
      }
      if (s.ok()) s = matrix(p + "attn_q_b.weight", o.n_head * q_head, o.q_lora_rank);
    } else {
      s = matrix(p + "attn_q.weight", o.n_head * q_head, o.n_embd);
    }
    if (s.ok()) s = matrix(p + "attn_kv_a_mqa.weight", head_dim, o.n_embd);
    if (s.ok()) {
      s = w.AddTensorF32(p + "attn_kv_a_norm.weight", {o.kv_lora_rank}, norm(o.kv_lora_rank));
    }
    if (s.ok()) s = stacked(p + "attn_k_b.weight", o.kv_lora_rank, o.qk_nope_dim, o.n_head);
    if (s.ok()) s = stacked(p + "attn_v_b.weight", o.v_head_dim, o.kv_lora_rank, o.n_head);
    if (s.ok()) s = matrix(p + "attn_output.weight", o.n_embd, o.n_head * o.v_head_dim);
    return s;
  };
  absl::Status s = matrix("token_embd.weight", n_vocab, o.n_embd);
  if (s.ok()) s = w.AddTensorF32("output_norm.weight", {o.n_embd}, norm(o.n_embd));
  if (s.ok() && !o.tied_output) s = matrix("output.weight", n_vocab, o.n_embd);
  for (int32_t l = 0; l < o.n_layer && s.ok(); ++l) {
    const std::string p = absl::StrCat("blk.", l, ".");
    s = w.AddTensorF32(p + "attn_norm.weight", {o.n_embd}, norm(o.n_embd));
    if (s.ok() && deepseek2) s = latent_attention(p);
    if (s.ok() && !deepseek2) s = matrix(p + "attn_q.weight", q_dim, o.n_embd);
    if (s.ok() && !deepseek2) s = matrix(p + "attn_k.weight", kv_dim, o.n_embd);
    if (s.ok() && !deepseek2) s = matrix(p + "attn_v.weight", kv_dim, o.n_embd);
    if (s.ok() && qkv_bias) {
      s = w.AddTensorF32(p + "attn_q.bias", {q_dim}, random(q_dim, 0.1f));
      if (s.ok()) s = w.AddTensorF32(p + "attn_k.bias", {kv_dim}, random(kv_dim, 0.1f));
      if (s.ok()) s = w.AddTensorF32(p + "attn_v.bias", {kv_dim}, random(kv_dim, 0.1f));
    }
    if (s.ok() && qk_norm) {
      s = w.AddTensorF32(p + "attn_q_norm.weight", {head_dim}, norm(head_dim));
      if (s.ok()) s = w.AddTensorF32(p + "attn_k_norm.weight", {head_dim}, norm(head_dim));
    }
    if (s.ok() && !deepseek2) s = matrix(p + "attn_output.weight", o.n_embd, q_dim);
    if (s.ok() && gpt_oss) {
      s = w.AddTensorF32(p + "attn_output.bias", {o.n_embd}, random(o.n_embd, 0.1f));
      // Sinks about as large as the scores, so that they take a real share of each softmax.
      if (s.ok()) s = w.AddTensorF32(p + "attn_sinks.weight", {o.n_head}, random(o.n_head, 1.0f));
    }
    if (s.ok() && post_norms) {
      s = w.AddTensorF32(p + "post_attention_norm.weight", {o.n_embd}, norm(o.n_embd));
    }
    // gpt-oss names its feed-forward block's input norm post_attention_norm.
    if (s.ok()) {
      s = w.AddTensorF32(p + (gpt_oss ? "post_attention_norm.weight" : "ffn_norm.weight"),
                         {o.n_embd}, norm(o.n_embd));
    }
    const bool dense = o.n_expert == 0 || l < o.leading_dense;
    if (s.ok() && dense) {
      s = matrix(p + "ffn_gate.weight", o.n_ff, o.n_embd);
      if (s.ok()) s = matrix(p + "ffn_up.weight", o.n_ff, o.n_embd);
      if (s.ok()) s = matrix(p + "ffn_down.weight", o.n_embd, o.n_ff);
    }
    if (s.ok() && !dense) {
      const int32_t ff = ExpertFf(o);
      // A router's logits of a few units: sharp enough that the choice of experts matters.
      s = w.AddTensorF32(p + "ffn_gate_inp.weight", {o.n_embd, o.n_expert},
                         random(static_cast<size_t>(o.n_embd) * o.n_expert, 0.5f));
      if (s.ok() && o.selection_bias) {
        s = w.AddTensorF32(p + "exp_probs_b.bias", {o.n_expert}, random(o.n_expert, 0.1f));
      }
      if (s.ok()) s = experts(p + "ffn_gate_exps.weight", ff, o.n_embd);
      if (s.ok()) s = experts(p + "ffn_up_exps.weight", ff, o.n_embd);
      if (s.ok()) s = experts(p + "ffn_down_exps.weight", o.n_embd, ff);
      if (s.ok() && gpt_oss) {
        const size_t n = static_cast<size_t>(o.n_expert);
        s = w.AddTensorF32(p + "ffn_gate_inp.bias", {o.n_expert}, random(n, 0.5f));
        if (s.ok()) {
          s = w.AddTensorF32(p + "ffn_gate_exps.bias", {ff, o.n_expert}, random(n * ff, 0.1f));
        }
        if (s.ok()) {
          s = w.AddTensorF32(p + "ffn_up_exps.bias", {ff, o.n_expert}, random(n * ff, 0.1f));
        }
        if (s.ok()) {
          s = w.AddTensorF32(p + "ffn_down_exps.bias", {o.n_embd, o.n_expert},
                             random(n * o.n_embd, 0.1f));
        }
      }
    }
    if (s.ok() && (a == "qwen2moe" || (!dense && o.n_expert_shared > 0))) {
      const int32_t ff = deepseek2 ? o.n_expert_shared * ExpertFf(o) : SharedFf(o);
      if (!deepseek2) {
        s = w.AddTensorF32(p + "ffn_gate_inp_shexp.weight", {o.n_embd}, random(o.n_embd, 0.2f));
      }
      if (s.ok()) s = matrix(p + "ffn_gate_shexp.weight", ff, o.n_embd);
      if (s.ok()) s = matrix(p + "ffn_up_shexp.weight", ff, o.n_embd);
      if (s.ok()) s = matrix(p + "ffn_down_shexp.weight", o.n_embd, ff);
    }
    if (s.ok() && post_norms) {
      s = w.AddTensorF32(p + "post_ffw_norm.weight", {o.n_embd}, norm(o.n_embd));
    }
  }
  if (!s.ok()) return s;
  return w.WriteFile(path);
}

const char kSyntheticShapes[] =
    "tiny, tiny-qwen3, tiny-gemma3, tiny-qwen3moe, tiny-qwen2moe, tiny-mixtral, tiny-gpt-oss, "
    "tiny-deepseek2, tiny-deepseek3, tiny-256, "
    "smollm2-135m, "
    "qwen2-0.5b, llama-3.2-1b, llama-3-8b, qwen3-0.6b, gemma3-270m, qwen3moe-8x, gpt-oss-mini, "
    "deepseek2-mini";

absl::StatusOr<SyntheticModelOptions> SyntheticShape(std::string_view name) {
  SyntheticModelOptions o;
  auto shape = [&o](int32_t layers, int32_t embd, int32_t heads, int32_t kv_heads, int32_t ff,
                    int32_t vocab, int32_t ctx, float rope_base, bool tied) {
    o.n_layer = layers;
    o.n_embd = embd;
    o.n_head = heads;
    o.n_head_kv = kv_heads;
    o.n_ff = ff;
    o.n_vocab = vocab;
    o.n_ctx = ctx;
    o.rope_freq_base = rope_base;
    o.tied_output = tied;
  };
  // deepseek2's latent attention: one kv head of kv_rank + rope values.
  auto latent = [&o](int32_t kv_rank, int32_t q_rank, int32_t rope, int32_t nope, int32_t value) {
    o.n_head_kv = 1;
    o.kv_lora_rank = kv_rank;
    o.q_lora_rank = q_rank;
    o.qk_rope_dim = rope;
    o.qk_nope_dim = nope;
    o.v_head_dim = value;
    o.head_dim = kv_rank + rope;
  };
  if (name == "tiny") return o;
  if (name == "tiny-qwen3") {
    o.architecture = "qwen3";
    o.head_dim = 32;
    return o;
  }
  if (name == "tiny-qwen3moe") {  // 8 experts, 2 per token
    o.architecture = "qwen3moe";
    o.head_dim = 32;
    o.n_expert = 8;
    o.n_expert_used = 2;
    o.n_ff_expert = 64;
    return o;
  }
  if (name == "tiny-qwen2moe") {  // 4 experts, 2 per token, and a shared expert
    o.architecture = "qwen2moe";
    o.n_expert = 4;
    o.n_expert_used = 2;
    o.n_ff_expert = 32;
    o.n_ff_shared = 128;
    o.tied_output = false;  // llama.cpp's qwen2moe wants output.weight
    return o;
  }
  if (name == "tiny-gpt-oss") {  // 4 layers (local, global, ...), 4 experts, 2 per token, YaRN
    o.architecture = "gpt-oss";
    o.n_layer = 4;
    o.head_dim = 32;
    o.sliding_window = 24;
    o.n_expert = 4;
    o.n_expert_used = 2;
    o.n_ff_expert = 64;
    o.rope_yarn_factor = 4.0f;
    o.tied_output = false;  // llama.cpp's gpt-oss wants output.weight
    return o;
  }
  if (name == "tiny-deepseek2" || name == "tiny-deepseek3") {
    // DeepSeek-V2-Lite's layout in small: latent attention (rank 32, RoPE 16, nope 32, values
    // 32), a dense first layer, 8 experts of which 2 per token and 2 shared, YaRN with
    // DeepSeek's magnitude scale. V3's adds Q's low-rank bottleneck, sigmoid gating with a
    // selection bias in 4 groups of which 2 count, renormalized and scaled weights, 1 shared.
    o.architecture = "deepseek2";
    o.n_layer = 3;
    latent(32, name == "tiny-deepseek2" ? 0 : 48, 16, 32, 32);
    o.leading_dense = 1;
    o.n_expert = 8;
    o.n_expert_used = 2;
    o.n_ff_expert = 32;
    o.n_expert_shared = 2;
    o.tied_output = false;  // llama.cpp's deepseek2 wants output.weight
    if (name == "tiny-deepseek2") {
      o.rope_yarn_factor = 4.0f;
      o.rope_yarn_log_multiplier = 0.1f * 0.707f;  // as the converter writes mscale_all_dim
    } else {
      o.n_expert_shared = 1;
      o.sigmoid_gating = true;
      o.selection_bias = true;
      o.expert_groups = 4;
      o.expert_groups_used = 2;
      o.expert_weights_norm = true;
      o.expert_weights_scale = 2.5f;
    }
    return o;
  }
  if (name == "tiny-mixtral") {  // llama with 4 experts, 2 per token
    o.n_expert = 4;
    o.n_expert_used = 2;
    return o;
  }
  if (name == "tiny-256") {  // rows of 256 values: the i-quants' and K-quants' super-block
    o.n_embd = 256;
    o.n_ff = 512;
    return o;
  }
  if (name == "tiny-gemma3") {  // five local layers (window 32, RoPE base 1e4), a global one (1e6)
    o.architecture = "gemma3";
    o.rope_freq_base = 1e6f;
    o.n_layer = 6;
    o.head_dim = 32;
    o.sliding_window = 32;
    return o;
  }
  if (name == "smollm2-135m") {
    shape(30, 576, 9, 3, 1536, 49152, 8192, 100000.0f, true);
  } else if (name == "qwen2-0.5b") {
    o.architecture = "qwen2";
    shape(24, 896, 14, 2, 4864, 151936, 32768, 1000000.0f, true);
  } else if (name == "llama-3.2-1b") {
    shape(16, 2048, 32, 8, 8192, 128256, 8192, 500000.0f, true);
  } else if (name == "llama-3-8b") {
    shape(32, 4096, 32, 8, 14336, 128256, 8192, 500000.0f, false);
  } else if (name == "qwen3-0.6b") {
    o.architecture = "qwen3";
    shape(28, 1024, 16, 8, 3072, 151936, 40960, 1000000.0f, true);
    o.head_dim = 128;
  } else if (name == "qwen3moe-8x") {  // a small mixture: 8 experts, 2 per token, ~0.5B
    o.architecture = "qwen3moe";
    shape(12, 1024, 16, 8, 3072, 32000, 32768, 1000000.0f, true);
    o.head_dim = 64;
    o.n_expert = 8;
    o.n_expert_used = 2;
    o.n_ff_expert = 1536;
  } else if (name == "gpt-oss-mini") {
    // gpt-oss-20b's layout (head 64, 8 kv heads, 32 experts of which 4 per token, windows of 128
    // on every other layer, YaRN 32 over 4096) at half its layers and about a third its width:
    // 12 layers of 1024, experts of 512, 0.7B.
    o.architecture = "gpt-oss";
    shape(12, 1024, 16, 8, 512, 32000, 131072, 150000.0f, false);
    o.head_dim = 64;
    o.sliding_window = 128;
    o.n_expert = 32;
    o.n_expert_used = 4;
    o.n_ff_expert = 512;
    o.rope_yarn_factor = 32.0f;
  } else if (name == "deepseek2-mini") {
    // DeepSeek-V2-Lite's layout (latent rank 512, RoPE 64, nope 128, values 128, 16 heads of
    // 2048, a dense first layer, 64 experts of 1408 of which 6 per token and 2 shared, YaRN 40
    // over 4096) at 8 of its 27 layers, with V2's Q bottleneck of 1536 (which ik_llama.cpp's
    // loader wants of a DeepSeek without 27 layers): 4.9B.
    o.architecture = "deepseek2";
    shape(8, 2048, 16, 1, 10944, 102400, 163840, 10000.0f, false);
    latent(512, 1536, 64, 128, 128);
    o.leading_dense = 1;
    o.n_expert = 64;
    o.n_expert_used = 6;
    o.n_ff_expert = 1408;
    o.n_expert_shared = 2;
    o.rope_yarn_factor = 40.0f;
    o.rope_yarn_log_multiplier = 0.1f * 0.707f;
  } else if (name == "gemma3-270m") {
    o.architecture = "gemma3";
    shape(18, 640, 4, 1, 2048, 262144, 32768, 1000000.0f, true);
    o.head_dim = 256;
    o.sliding_window = 512;
  } else {
    return absl::NotFoundError(absl::StrCat("no synthetic shape '", std::string(name),
                                            "'; known: ", kSyntheticShapes));
  }
  return o;
}

}  // namespace baton::engine
