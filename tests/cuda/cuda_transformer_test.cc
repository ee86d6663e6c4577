// The whole model on the CUDA backend against the CPU engine: one Transformer drives both.
// Teacher-forced logits of a prefill (the GEMM path) and of decode steps (the matrix-vector
// path) agree with the CPU's scalar reference within tolerance, and the perplexity the logits
// give is within 0.5% of the CPU engine's.
// Skips, saying why, where no CUDA GPU is usable.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <iostream>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/kv_cache.h"
#include "engine/model.h"
#include "engine/synthetic_model.h"
#include "engine/transformer.h"
#include "gtest/gtest.h"
#include "kernels/cuda/cuda_backend.h"
#include "tests/support/temp_path.h"

namespace baton::engine {
namespace {

struct Engine {
  std::unique_ptr<kernels::Backend> backend;
  std::unique_ptr<KvCache> cache;
  std::unique_ptr<Transformer> transformer;
};

absl::StatusOr<Engine> MakeEngine(const Model& model, std::unique_ptr<kernels::Backend> backend) {
  Engine e;
  e.backend = std::move(backend);
  absl::StatusOr<std::unique_ptr<KvCache>> cache =
      KvCache::Create(model.config(),
                      {.block_size = 16,
                       .n_blocks = 32 * KvCache::LayerGroups(model.config()).n_groups()},
                      *e.backend);
  if (!cache.ok()) return cache.status();
  e.cache = *std::move(cache);
  e.transformer = std::make_unique<Transformer>(&model.config(), &model.weights(),
                                                e.backend.get(), e.cache.get());
  return e;
}

std::vector<TokenId> Tokens(int n, int salt) {
  std::vector<TokenId> t(n);
  for (int i = 0; i < n; ++i) t[i] = (i * 37 + salt * 11 + 5) % 256;
  return t;
}

// Prefill of `prompt` with every row's logits, then one decode step for each of `forced`.
std::vector<float> TeacherForced(Engine& e, const std::vector<TokenId>& prompt,
                                 const std::vector<TokenId>& forced) {
  BlockTable kv;
  EXPECT_TRUE(e.cache->Reserve(kv, static_cast<int32_t>(prompt.size() + forced.size())).ok());
  std::vector<float> all, logits;
  SequenceInput input{.tokens = prompt, .kv = &kv, .all_logits = true};
  EXPECT_TRUE(e.transformer->Prefill({&input, 1}, logits).ok());
  all = logits;
  for (const TokenId& t : forced) {
    SequenceInput step{.tokens = {&t, 1}, .kv = &kv};
    EXPECT_TRUE(e.transformer->Decode({&step, 1}, logits).ok());
    all.insert(all.end(), logits.begin(), logits.end());
  }
  e.cache->Free(kv);
  return all;
}

// Mean negative log-likelihood of tokens[i + 1] under logits row i.
double MeanNll(const std::vector<float>& logits, const std::vector<TokenId>& tokens,
               int32_t n_vocab) {
  double total = 0.0;
  for (size_t i = 0; i + 1 < tokens.size(); ++i) {
    const float* row = logits.data() + i * n_vocab;
    const double max = *std::max_element(row, row + n_vocab);
    double sum = 0.0;
    for (int32_t v = 0; v < n_vocab; ++v) sum += std::exp(row[v] - max);
    total += max + std::log(sum) - row[tokens[i + 1]];
  }
  return total / static_cast<double>(tokens.size() - 1);
}

// Mean KL(softmax(p) || softmax(q)) over the rows of two [rows, n_vocab] logit arrays.
double MeanKld(const std::vector<float>& p, const std::vector<float>& q, int32_t n_vocab) {
  const size_t rows = p.size() / n_vocab;
  double total = 0.0;
  for (size_t r = 0; r < rows; ++r) {
    const float* a = p.data() + r * n_vocab;
    const float* b = q.data() + r * n_vocab;
    const double max_a = *std::max_element(a, a + n_vocab);
    const double max_b = *std::max_element(b, b + n_vocab);
    double sum_a = 0.0, sum_b = 0.0;
    for (int32_t v = 0; v < n_vocab; ++v) {
      sum_a += std::exp(a[v] - max_a);
      sum_b += std::exp(b[v] - max_b);
    }
    const double log_za = max_a + std::log(sum_a), log_zb = max_b + std::log(sum_b);
    for (int32_t v = 0; v < n_vocab; ++v) {
      const double log_pa = a[v] - log_za;
      total += std::exp(log_pa) * (log_pa - (b[v] - log_zb));
    }
  }
  return total / static_cast<double>(rows);
}

double MaxErrorOverRms(const std::vector<float>& got, const std::vector<float>& want) {
  double max_err = 0.0, norm = 0.0;
  for (size_t i = 0; i < want.size(); ++i) {
    max_err = std::max(max_err, std::fabs(static_cast<double>(got[i]) - want[i]));
    norm += static_cast<double>(want[i]) * want[i];
  }
  return max_err / std::sqrt(norm / static_cast<double>(want.size()));
}

using ModelCase = std::tuple<std::string, kernels::DType, SyntheticMix>;

class CudaTransformerTest : public ::testing::TestWithParam<ModelCase> {};

TEST_P(CudaTransformerTest, TeacherForcedLogitsAndPerplexityMatchTheCpu) {
  absl::StatusOr<std::unique_ptr<kernels::Backend>> gpu =
      kernels::cuda::CreateCudaBackend({.device = 0});
  if (!gpu.ok()) GTEST_SKIP() << "needs a CUDA GPU: " << gpu.status().message();
  const auto& [architecture, dtype, mix] = GetParam();
  SyntheticModelOptions options{.seed = 3,
                                .architecture = architecture,
                                .n_layer = 3,
                                .n_embd = 256,
                                .n_head = 4,
                                .n_head_kv = 2,
                                .n_ff = 512,
                                .n_ctx = 512,
                                .weight_dtype = dtype,
                                .mix = mix};
  if (architecture == "gemma3") {  // head size 128, local layers (window 32) and a global one
    options.n_layer = 6;
    options.head_dim = 128;
    options.sliding_window = 32;
  }
  if (architecture == "qwen3moe") {  // 4 experts, 2 per token
    options.head_dim = 128;
    options.n_expert = 4;
    options.n_expert_used = 2;
    options.n_ff_expert = 256;
  }
  if (architecture == "gpt-oss") {  // sinks, biases, swiglu_oai, YaRN; local layers of 32
    options.n_layer = 4;
    options.head_dim = 64;
    options.sliding_window = 32;
    options.n_expert = 4;
    options.n_expert_used = 2;
    options.n_ff_expert = 256;
    options.rope_yarn_factor = 4.0f;
  }
  if (architecture == "deepseek2") {  // latent attention at DeepSeek's dims: heads of 576 values
    options.n_head_kv = 1;
    options.kv_lora_rank = 512;
    options.qk_rope_dim = 64;
    options.qk_nope_dim = 128;
    options.v_head_dim = 128;
    options.head_dim = 576;
    options.leading_dense = 1;
    options.n_expert = 4;
    options.n_expert_used = 2;
    options.n_ff_expert = 256;
    options.n_expert_shared = 1;
  }
  const std::string path = test_support::TempPath(
      "cuda-transformer-" + architecture + "-" + std::string(kernels::DTypeName(dtype)) +
      (mix == SyntheticMix::kQ4_K_M ? "-q4_k_m" : "") + ".gguf");
  ASSERT_TRUE(WriteSyntheticModel(path, options).ok());
  absl::StatusOr<std::unique_ptr<Model>> model = Model::Load(path);
  ASSERT_TRUE(model.ok()) << model.status();
  const int32_t n_vocab = (*model)->config().n_vocab;

  // The logits against the CPU's scalar reference (exact weights, f64 sums); the perplexity
  // against the CPU engine as it serves (activations quantized for its integer products).
  absl::StatusOr<Engine> reference =
      MakeEngine(**model, kernels::CreateCpuBackend({.reference = true}));
  absl::StatusOr<Engine> cpu = MakeEngine(**model, kernels::CreateCpuBackend({.n_threads = 2}));
  absl::StatusOr<Engine> cuda = MakeEngine(**model, *std::move(gpu));
  ASSERT_TRUE(reference.ok()) << reference.status();
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  ASSERT_TRUE(cuda.ok()) << cuda.status();

  const std::vector<TokenId> prompt = Tokens(100, 1), forced = Tokens(6, 2);
  const std::vector<float> want = TeacherForced(*reference, prompt, forced);
  const std::vector<float> served = TeacherForced(*cpu, prompt, forced);
  const std::vector<float> got = TeacherForced(*cuda, prompt, forced);
  ASSERT_EQ(got.size(), want.size());
  for (float v : got) ASSERT_TRUE(std::isfinite(v));
  const int64_t prefill_values = static_cast<int64_t>(prompt.size()) * n_vocab;
  const std::vector<float> want_prefill(want.begin(), want.begin() + prefill_values);
  const std::vector<float> got_prefill(got.begin(), got.begin() + prefill_values);
  const std::vector<float> want_decode(want.begin() + prefill_values, want.end());
  const std::vector<float> got_decode(got.begin() + prefill_values, got.end());
  EXPECT_LT(MaxErrorOverRms(got_prefill, want_prefill), 3e-2) << "prefill (f16 GEMM)";
  // Decode's products quantize x to 8 bits, as the CPU engine's do, and it attends over the K/V
  // the f16 prefill wrote: its divergence from the exact reference stays within the CPU
  // engine's own (issue 51's accuracy target), with room for noise at this tiny level.
  const std::vector<float> served_decode(served.begin() + prefill_values, served.end());
  const double kld_cuda = MeanKld(want_decode, got_decode, n_vocab);
  const double kld_cpu = MeanKld(want_decode, served_decode, n_vocab);
  // Measured on an H200: 0.062-0.077 on the quantized models (0.0025 on f16), KLD 0.28-0.77
  // times the CPU engine's.
  EXPECT_LT(MaxErrorOverRms(got_decode, want_decode), 0.15) << "decode (8-bit activations)";
  EXPECT_LE(kld_cuda, 2.0 * kld_cpu + 1e-6)
      << "decode KLD against the reference: " << kld_cuda << " on CUDA, " << kld_cpu << " on CPU";
  RecordProperty("decode_kld_cuda", std::to_string(kld_cuda));
  RecordProperty("decode_kld_cpu", std::to_string(kld_cpu));
  std::cout << "decode KLD against the reference: cuda " << kld_cuda << ", cpu " << kld_cpu
            << "; max error / rms " << MaxErrorOverRms(got_decode, want_decode) << "\n";

  const std::vector<float> served_prefill(served.begin(), served.begin() + prefill_values);
  const double nll_cpu = MeanNll(served_prefill, prompt, n_vocab);
  const double nll_cuda = MeanNll(got_prefill, prompt, n_vocab);
  EXPECT_NEAR(std::exp(nll_cuda) / std::exp(nll_cpu), 1.0, 0.005)
      << "perplexity " << std::exp(nll_cuda) << " on CUDA, " << std::exp(nll_cpu) << " on CPU";
}

INSTANTIATE_TEST_SUITE_P(
    Models, CudaTransformerTest,
    ::testing::Values(ModelCase{"llama", kernels::DType::kF16, SyntheticMix::kUniform},
                      ModelCase{"llama", kernels::DType::kQ8_0, SyntheticMix::kUniform},
                      ModelCase{"llama", kernels::DType::kQ4_0, SyntheticMix::kUniform},
                      ModelCase{"llama", kernels::DType::kQ4_K, SyntheticMix::kQ4_K_M},
                      ModelCase{"qwen2", kernels::DType::kQ8_0, SyntheticMix::kUniform},
                      ModelCase{"qwen3", kernels::DType::kQ8_0, SyntheticMix::kUniform},
                      ModelCase{"gemma3", kernels::DType::kQ8_0, SyntheticMix::kUniform},
                      ModelCase{"qwen3moe", kernels::DType::kQ8_0, SyntheticMix::kUniform},
                      ModelCase{"gpt-oss", kernels::DType::kQ8_0, SyntheticMix::kUniform},
                      ModelCase{"deepseek2", kernels::DType::kQ8_0, SyntheticMix::kUniform}),
    [](const auto& info) {
      std::string architecture = std::get<0>(info.param);
      for (char& c : architecture) c = c == '-' ? '_' : c;
      return architecture + "_" +
             std::string(kernels::DTypeName(std::get<1>(info.param))) +
             (std::get<2>(info.param) == SyntheticMix::kQ4_K_M ? "_m" : "");
    });

// Decode steps recorded as CUDA graphs and replayed give the logits of the same steps run
// eagerly, bit for bit (the same kernels in the same order), over steps that cross block
// boundaries (new shapes: run eagerly, then captured, then replayed) for one sequence and a
// batch of three.
TEST(CudaTransformerStepGraphTest, ReplayedStepsGiveTheEagerLogits) {
  const SyntheticModelOptions options{.seed = 5, .n_layer = 2, .n_embd = 256, .n_head = 4,
                                      .n_head_kv = 2, .n_ff = 512, .n_ctx = 512,
                                      .weight_dtype = kernels::DType::kQ4_K};
  const std::string path = test_support::TempPath("cuda-transformer-graphs.gguf");
  ASSERT_TRUE(WriteSyntheticModel(path, options).ok());
  absl::StatusOr<std::unique_ptr<Model>> model = Model::Load(path);
  ASSERT_TRUE(model.ok()) << model.status();
  std::vector<float> results[2];
  for (const bool graphs : {false, true}) {
    absl::StatusOr<std::unique_ptr<kernels::Backend>> gpu =
        kernels::cuda::CreateCudaBackend({.device = 0, .step_graphs = graphs});
    if (!gpu.ok()) GTEST_SKIP() << "needs a CUDA GPU: " << gpu.status().message();
    absl::StatusOr<Engine> e = MakeEngine(**model, *std::move(gpu));
    ASSERT_TRUE(e.ok()) << e.status();
    std::vector<BlockTable> kv(3);
    std::vector<float> logits;
    for (int s = 0; s < 3; ++s) {
      ASSERT_TRUE(e->cache->Reserve(kv[s], 80).ok());
      const std::vector<TokenId> prompt = Tokens(5 + 3 * s, s);
      SequenceInput input{.tokens = prompt, .kv = &kv[s]};
      ASSERT_TRUE(e->transformer->Prefill({&input, 1}, logits).ok());
    }
    for (int step = 0; step < 40; ++step) {
      const TokenId next = static_cast<TokenId>((step * 13 + 1) % 256);
      // Alone for the first sequence, then the batch of three.
      std::vector<SequenceInput> batch;
      for (int s = 0; s < (step < 20 ? 1 : 3); ++s) {
        batch.push_back({.tokens = {&next, 1}, .kv = &kv[s]});
      }
      ASSERT_TRUE(e->transformer->Decode(batch, logits).ok());
      results[graphs].insert(results[graphs].end(), logits.begin(), logits.end());
    }
    for (BlockTable& t : kv) e->cache->Free(t);
  }
  ASSERT_EQ(results[0].size(), results[1].size());
  EXPECT_TRUE(std::memcmp(results[0].data(), results[1].data(),
                          results[0].size() * sizeof(float)) == 0);
}

// A decode batch of three sequences gives each the logits it gets decoding alone.
TEST(CudaTransformerBatchTest, ABatchDecodesAsEachSequenceAlone) {
  absl::StatusOr<std::unique_ptr<kernels::Backend>> gpu =
      kernels::cuda::CreateCudaBackend({.device = 0});
  if (!gpu.ok()) GTEST_SKIP() << "needs a CUDA GPU: " << gpu.status().message();
  const SyntheticModelOptions options{.seed = 4, .n_layer = 2, .n_embd = 256, .n_head = 4,
                                      .n_head_kv = 2, .n_ff = 512, .n_ctx = 512,
                                      .weight_dtype = kernels::DType::kQ8_0};
  const std::string path = test_support::TempPath("cuda-transformer-batch.gguf");
  ASSERT_TRUE(WriteSyntheticModel(path, options).ok());
  absl::StatusOr<std::unique_ptr<Model>> model = Model::Load(path);
  ASSERT_TRUE(model.ok()) << model.status();
  const int32_t n_vocab = (*model)->config().n_vocab;
  absl::StatusOr<Engine> e = MakeEngine(**model, *std::move(gpu));
  ASSERT_TRUE(e.ok()) << e.status();

  std::vector<BlockTable> kv(3);
  std::vector<float> logits;
  std::vector<std::vector<float>> alone(3);
  const TokenId next = 42;
  for (int s = 0; s < 3; ++s) {
    ASSERT_TRUE(e->cache->Reserve(kv[s], 40).ok());
    const std::vector<TokenId> prompt = Tokens(10 + 7 * s, s);
    SequenceInput input{.tokens = prompt, .kv = &kv[s]};
    ASSERT_TRUE(e->transformer->Prefill({&input, 1}, logits).ok());
    SequenceInput step{.tokens = {&next, 1}, .kv = &kv[s]};
    ASSERT_TRUE(e->transformer->Decode({&step, 1}, alone[s]).ok());
    kv[s].n_tokens -= 1;  // decode the same token again, in the batch
  }
  std::vector<SequenceInput> batch;
  for (int s = 0; s < 3; ++s) batch.push_back({.tokens = {&next, 1}, .kv = &kv[s]});
  ASSERT_TRUE(e->transformer->Decode(batch, logits).ok());
  for (int s = 0; s < 3; ++s) {
    const std::vector<float> row(logits.begin() + s * n_vocab, logits.begin() + (s + 1) * n_vocab);
    EXPECT_LT(MaxErrorOverRms(row, alone[s]), 1e-5) << "sequence " << s;
    e->cache->Free(kv[s]);
  }
}

}  // namespace
}  // namespace baton::engine
