#include "tests/support/synthetic_model.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>

#include <unistd.h>
#include <vector>

#include "absl/log/check.h"
#include "absl/strings/str_cat.h"
#include "engine/gguf_writer.h"
#include "kernels/half.h"

namespace baton::test_support {
namespace {

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

std::string Encode(kernels::DType dtype, const std::vector<float>& v) {
  std::string out;
  switch (dtype) {
    case kernels::DType::kF32:
      out.assign(reinterpret_cast<const char*>(v.data()), v.size() * 4);
      break;
    case kernels::DType::kF16:
    case kernels::DType::kBF16:
      for (float x : v) {
        uint16_t h = dtype == kernels::DType::kF16 ? kernels::F32ToF16(x) : kernels::F32ToBF16(x);
        out.append(reinterpret_cast<const char*>(&h), 2);
      }
      break;
    case kernels::DType::kQ8_0:
      for (size_t b = 0; b < v.size(); b += 32) {
        float amax = 0;
        for (size_t i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(v[b + i]));
        const float d = amax / 127.0f;
        const uint16_t dh = kernels::F32ToF16(d);
        out.append(reinterpret_cast<const char*>(&dh), 2);
        for (size_t i = 0; i < 32; ++i) {
          out += static_cast<char>(static_cast<int8_t>(d == 0 ? 0 : std::lround(v[b + i] / d)));
        }
      }
      break;
    default:
      std::abort();
  }
  return out;
}

}  // namespace

absl::Status WriteSyntheticModel(const std::string& path, const SyntheticModelOptions& o) {
  std::mt19937_64 rng(o.seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  engine::GgufWriter w;
  const std::string& a = o.architecture;
  w.AddString("general.architecture", a);
  w.AddString("general.name", "baton synthetic");
  w.AddUint32(a + ".block_count", o.n_layer);
  w.AddUint32(a + ".context_length", o.n_ctx);
  w.AddUint32(a + ".embedding_length", o.n_embd);
  w.AddUint32(a + ".feed_forward_length", o.n_ff);
  w.AddUint32(a + ".attention.head_count", o.n_head);
  w.AddUint32(a + ".attention.head_count_kv", o.n_head_kv);
  w.AddFloat32(a + ".rope.freq_base", 10000.0f);
  w.AddFloat32(a + ".attention.layer_norm_rms_epsilon", 1e-5f);

  std::vector<std::string> tokens;
  for (int b = 0; b < 256; ++b) tokens.push_back(ByteToken(b));
  const std::vector<std::string> merges = {"Ġ t", "h e", "Ġt he", "i n", "a n"};
  for (const std::string& m : merges) {
    std::string merged = m;
    merged.erase(merged.find(' '), 1);
    tokens.push_back(merged);
  }
  tokens.push_back("<|endoftext|>");
  const int32_t n_vocab = static_cast<int32_t>(tokens.size());
  std::vector<int32_t> types(n_vocab, 1);
  types.back() = 3;  // control
  w.AddString("tokenizer.ggml.model", "gpt2");
  w.AddString("tokenizer.ggml.pre", "gpt-2");
  w.AddStringArray("tokenizer.ggml.tokens", tokens);
  w.AddInt32Array("tokenizer.ggml.token_type", types);
  w.AddStringArray("tokenizer.ggml.merges", merges);
  w.AddUint32("tokenizer.ggml.bos_token_id", n_vocab - 1);
  w.AddUint32("tokenizer.ggml.eos_token_id", n_vocab - 1);
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
  auto matrix = [&](const std::string& name, int64_t rows, int64_t cols) -> absl::Status {
    const std::vector<float> v = random(rows * cols, 1.0f / std::sqrt(static_cast<float>(cols)));
    return w.AddTensor(name, o.weight_dtype, {cols, rows}, Encode(o.weight_dtype, v));
  };
  const int32_t head_dim = o.n_embd / o.n_head;
  const int32_t kv_dim = head_dim * o.n_head_kv;
  absl::Status s = matrix("token_embd.weight", n_vocab, o.n_embd);
  if (s.ok()) s = w.AddTensorF32("output_norm.weight", {o.n_embd}, norm(o.n_embd));
  if (s.ok() && !o.tied_output) s = matrix("output.weight", n_vocab, o.n_embd);
  for (int32_t l = 0; l < o.n_layer && s.ok(); ++l) {
    const std::string p = absl::StrCat("blk.", l, ".");
    s = w.AddTensorF32(p + "attn_norm.weight", {o.n_embd}, norm(o.n_embd));
    if (s.ok()) s = matrix(p + "attn_q.weight", o.n_embd, o.n_embd);
    if (s.ok()) s = matrix(p + "attn_k.weight", kv_dim, o.n_embd);
    if (s.ok()) s = matrix(p + "attn_v.weight", kv_dim, o.n_embd);
    if (s.ok() && a == "qwen2") {
      s = w.AddTensorF32(p + "attn_q.bias", {o.n_embd}, random(o.n_embd, 0.1f));
      if (s.ok()) s = w.AddTensorF32(p + "attn_k.bias", {kv_dim}, random(kv_dim, 0.1f));
      if (s.ok()) s = w.AddTensorF32(p + "attn_v.bias", {kv_dim}, random(kv_dim, 0.1f));
    }
    if (s.ok()) s = matrix(p + "attn_output.weight", o.n_embd, o.n_embd);
    if (s.ok()) s = w.AddTensorF32(p + "ffn_norm.weight", {o.n_embd}, norm(o.n_embd));
    if (s.ok()) s = matrix(p + "ffn_gate.weight", o.n_ff, o.n_embd);
    if (s.ok()) s = matrix(p + "ffn_up.weight", o.n_ff, o.n_embd);
    if (s.ok()) s = matrix(p + "ffn_down.weight", o.n_embd, o.n_ff);
  }
  if (!s.ok()) return s;
  return w.WriteFile(path);
}

std::string TempPath(const std::string& name) {
  // One directory per test process, made on first use and removed with everything in it when the
  // process exits (a crashed test leaves it behind, for a look).
  static const std::filesystem::path* const dir = [] {
    const char* root = std::getenv("TEST_TMPDIR");
    const std::filesystem::path base =
        root != nullptr ? root : std::filesystem::temp_directory_path();
    std::string pattern = (base / absl::StrCat("baton-test-", ::getpid(), "-XXXXXX")).string();
    CHECK(::mkdtemp(pattern.data()) != nullptr) << "mkdtemp " << pattern << ": "
                                                << std::strerror(errno);
    static const std::filesystem::path made = pattern;
    std::atexit([] {
      std::error_code ignored;
      std::filesystem::remove_all(made, ignored);
    });
    return &made;
  }();
  return (*dir / name).string();
}

}  // namespace baton::test_support
