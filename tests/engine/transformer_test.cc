#include "engine/transformer.h"

#include <fcntl.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/log/check.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/model.h"
#include "engine/synthetic_model.h"
#include "gtest/gtest.h"
#include "kernels/cpu/cpu_isa.h"
#include "kernels/cpu/dequantize.h"
#include "tests/support/own_memory_backend.h"
#include "tests/support/temp_path.h"

namespace baton::engine {
namespace {

struct Engine {
  std::unique_ptr<Model> model;
  std::unique_ptr<kernels::Backend> backend;
  std::unique_ptr<KvCache> cache;
  std::unique_ptr<Transformer> transformer;
};

// A synthetic model written from `options` and loaded, with a CPU backend and a cache of 64 blocks
// of 4 tokens for each layer group. Each engine gets a file of its own: rewriting a file that another engine still
// maps (and reads its weights' pages back from) would pull the bytes from under it.
// With `own_memory`, the backend declares its memory not the host's (own_memory_backend.h).
absl::StatusOr<Engine> MakeEngine(const SyntheticModelOptions& options, bool reference = false,
                                  bool own_memory = false) {
  const std::string path = test_support::TempPath(
      "transformer-" + options.architecture + "-" + std::to_string(options.seed) + "-" +
      std::to_string(static_cast<int>(options.weight_dtype)) + "-" +
      std::to_string(options.n_embd) + "-" + std::to_string(options.n_layer) + "-" +
      std::to_string(options.head_dim) + "-" + std::to_string(options.sliding_window) + "-" +
      std::to_string(options.n_expert) + "-" + std::to_string(options.q_lora_rank) +
      (reference ? "-reference" : "") +
      (own_memory ? "-own-memory" : "") + ".gguf");
  if (absl::Status written = engine::WriteSyntheticModel(path, options); !written.ok()) {
    return written;
  }
  Engine e;
  absl::StatusOr<std::unique_ptr<Model>> model = Model::Load(path);
  if (!model.ok()) return model.status();
  e.model = *std::move(model);
  e.backend = kernels::CreateCpuBackend({.n_threads = 2, .reference = reference});
  if (own_memory) e.backend = std::make_unique<test_support::OwnMemoryBackend>(std::move(e.backend));
  absl::StatusOr<std::unique_ptr<KvCache>> cache =
      KvCache::Create(e.model->config(),
                      {.block_size = 4,
                       .n_blocks = 64 * KvCache::LayerGroups(e.model->config()).n_groups()},
                      *e.backend);
  if (!cache.ok()) return cache.status();
  e.cache = *std::move(cache);
  e.transformer = std::make_unique<Transformer>(&e.model->config(), &e.model->weights(),
                                                e.backend.get(), e.cache.get());
  return e;
}

std::vector<TokenId> Tokens(int n, int salt) {
  std::vector<TokenId> t(n);
  for (int i = 0; i < n; ++i) t[i] = (i * 37 + salt * 11 + 5) % 256;
  return t;
}

std::vector<float> Row(const std::vector<float>& logits, int64_t row, int32_t n_vocab) {
  return std::vector<float>(logits.begin() + row * n_vocab, logits.begin() + (row + 1) * n_vocab);
}

void ExpectClose(const std::vector<float>& a, const std::vector<float>& b, float tolerance) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_TRUE(std::isfinite(a[i]) && std::isfinite(b[i])) << "at " << i;
    ASSERT_NEAR(a[i], b[i], tolerance * (1 + std::fabs(b[i]))) << "at " << i;
  }
}

// An architecture's tiny synthetic model: a head size other than n_embd / n_head where the
// architecture reads one, sliding windows shorter than the tests' prompts.
struct ArchitectureCase {
  std::string name;  // the test's name
  std::string shape;  // a synthetic shape (SyntheticShape) in place of the fields below
  std::string architecture;
  int32_t head_dim = 0;
  int32_t sliding_window = 0;
  int32_t n_layer = 2;
  int32_t n_expert = 0;  // 2 of them per token
  int32_t n_ff_shared = 0;
  float rope_yarn_factor = 0.0f;

  SyntheticModelOptions Options(uint64_t seed) const {
    if (!shape.empty()) {
      absl::StatusOr<SyntheticModelOptions> o = SyntheticShape(shape);
      CHECK(o.ok()) << o.status();
      o->seed = seed;
      return *o;
    }
    return {.seed = seed, .architecture = architecture, .n_layer = n_layer,
            .head_dim = head_dim, .sliding_window = sliding_window, .n_expert = n_expert,
            .n_expert_used = n_expert > 0 ? 2 : 0, .n_ff_shared = n_ff_shared,
            .rope_yarn_factor = rope_yarn_factor};
  }
};

class TransformerTest : public testing::TestWithParam<ArchitectureCase> {};

TEST_P(TransformerTest, PrefillThenDecodeMatchesOnePrefill) {
  absl::StatusOr<Engine> made = MakeEngine(GetParam().Options(1));
  ASSERT_TRUE(made.ok()) << made.status();
  Engine& e = *made;
  const int32_t n_vocab = e.model->config().n_vocab;
  const std::vector<TokenId> tokens = Tokens(21, 1);

  BlockTable whole;
  ASSERT_TRUE(e.cache->Reserve(whole, 21).ok());
  std::vector<float> all;
  SequenceInput in{.tokens = tokens, .kv = &whole, .all_logits = true};
  ASSERT_TRUE(e.transformer->Prefill({&in, 1}, all).ok());
  ASSERT_EQ(all.size(), 21u * n_vocab);
  EXPECT_EQ(whole.n_tokens, 21);

  BlockTable split;
  ASSERT_TRUE(e.cache->Reserve(split, 21).ok());
  std::vector<float> logits;
  SequenceInput head{.tokens = {tokens.data(), 13}, .kv = &split};
  ASSERT_TRUE(e.transformer->Prefill({&head, 1}, logits).ok());
  ExpectClose(logits, Row(all, 12, n_vocab), 1e-5f);
  for (int i = 13; i < 21; ++i) {
    SequenceInput step{.tokens = {&tokens[i], 1}, .kv = &split};
    ASSERT_TRUE(e.transformer->Decode({&step, 1}, logits).ok());
    ExpectClose(logits, Row(all, i, n_vocab), 1e-5f);
  }
  e.cache->Free(whole);
  e.cache->Free(split);
  EXPECT_EQ(e.cache->pool().n_free(), e.cache->pool().n_blocks());
}

// A cache whose windowed layers let go of the blocks their window has passed (Reserve before each
// step, as the decode batch does) gives the bits of one that keeps every block.
TEST_P(TransformerTest, LettingGoOfBlocksAWindowPassedChangesNoLogit) {
  absl::StatusOr<Engine> made = MakeEngine(GetParam().Options(3));
  ASSERT_TRUE(made.ok()) << made.status();
  Engine& e = *made;
  const int32_t n_vocab = e.model->config().n_vocab;
  const std::vector<TokenId> tokens = Tokens(30, 2);
  BlockTable kept;
  BlockTable sliding;
  ASSERT_TRUE(e.cache->Reserve(kept, 30).ok());
  ASSERT_TRUE(e.cache->Reserve(sliding, 9).ok());
  std::vector<float> kept_logits;
  std::vector<float> sliding_logits;
  for (BlockTable* t : {&kept, &sliding}) {
    SequenceInput head{.tokens = {tokens.data(), 9}, .kv = t};
    ASSERT_TRUE(e.transformer->Prefill({&head, 1}, t == &kept ? kept_logits : sliding_logits).ok());
  }
  for (int i = 9; i < 30; ++i) {
    ASSERT_TRUE(e.cache->Reserve(sliding, i + 1).ok());
    SequenceInput a{.tokens = {&tokens[i], 1}, .kv = &kept};
    SequenceInput b{.tokens = {&tokens[i], 1}, .kv = &sliding};
    ASSERT_TRUE(e.transformer->Decode({&a, 1}, kept_logits).ok());
    ASSERT_TRUE(e.transformer->Decode({&b, 1}, sliding_logits).ok());
    ASSERT_EQ(0, std::memcmp(kept_logits.data(), sliding_logits.data(), n_vocab * sizeof(float)))
        << "at position " << i;
  }
  if (GetParam().sliding_window > 0) {
    EXPECT_LT(e.cache->HeldBlocks(sliding), e.cache->HeldBlocks(kept));
  } else {
    EXPECT_EQ(e.cache->HeldBlocks(sliding), e.cache->HeldBlocks(kept));
  }
  e.cache->Free(kept);
  e.cache->Free(sliding);
  EXPECT_EQ(e.cache->pool().n_free(), e.cache->pool().n_blocks());
}

TEST_P(TransformerTest, DecodeIsBatchInvariant) {
  absl::StatusOr<Engine> made = MakeEngine(GetParam().Options(7));
  ASSERT_TRUE(made.ok()) << made.status();
  Engine& e = *made;
  const int32_t n_vocab = e.model->config().n_vocab;
  std::vector<BlockTable> tables(4);
  std::vector<std::vector<TokenId>> prompts;
  std::vector<float> logits;
  for (int s = 0; s < 4; ++s) {
    ASSERT_TRUE(e.cache->Reserve(tables[s], 16).ok());
    prompts.push_back(Tokens(3 + 2 * s, s));
  }
  // Sequence 0 alone, on a copy of its state...
  BlockTable alone;
  ASSERT_TRUE(e.cache->Reserve(alone, 16).ok());
  SequenceInput a{.tokens = prompts[0], .kv = &alone};
  ASSERT_TRUE(e.transformer->Prefill({&a, 1}, logits).ok());
  const TokenId next = 42;
  SequenceInput a_step{.tokens = {&next, 1}, .kv = &alone};
  ASSERT_TRUE(e.transformer->Decode({&a_step, 1}, logits).ok());
  const std::vector<float> alone_logits = logits;

  // ...and inside a batch of four prompts of different lengths, prefilled together.
  std::vector<SequenceInput> batch;
  for (int s = 0; s < 4; ++s) batch.push_back({.tokens = prompts[s], .kv = &tables[s]});
  ASSERT_TRUE(e.transformer->Prefill(batch, logits).ok());
  ASSERT_EQ(logits.size(), 4u * n_vocab);
  std::vector<TokenId> nexts = {next, 7, 8, 9};
  for (int s = 0; s < 4; ++s) batch[s] = {.tokens = {&nexts[s], 1}, .kv = &tables[s]};
  ASSERT_TRUE(e.transformer->Decode(batch, logits).ok());
  const std::vector<float> batched = Row(logits, 0, n_vocab);
  EXPECT_EQ(0, std::memcmp(batched.data(), alone_logits.data(), n_vocab * sizeof(float)))
      << "a sequence's logits changed when other sequences shared its batch";
}

TEST_P(TransformerTest, FastKernelsAgreeWithReference) {
  absl::StatusOr<Engine> fast_made = MakeEngine(GetParam().Options(3));
  ASSERT_TRUE(fast_made.ok()) << fast_made.status();
  Engine& fast = *fast_made;
  absl::StatusOr<Engine> ref_made =
      MakeEngine(GetParam().Options(3), /*reference=*/true);
  ASSERT_TRUE(ref_made.ok()) << ref_made.status();
  Engine& ref = *ref_made;
  const std::vector<TokenId> tokens = Tokens(9, 2);
  std::vector<float> a, b;
  BlockTable ta, tb;
  ASSERT_TRUE(fast.cache->Reserve(ta, 9).ok());
  ASSERT_TRUE(ref.cache->Reserve(tb, 9).ok());
  SequenceInput ia{.tokens = tokens, .kv = &ta, .all_logits = true};
  SequenceInput ib{.tokens = tokens, .kv = &tb, .all_logits = true};
  ASSERT_TRUE(fast.transformer->Prefill({&ia, 1}, a).ok());
  ASSERT_TRUE(ref.transformer->Prefill({&ib, 1}, b).ok());
  // F32 weights: the fast path quantizes nothing, so only summation order differs.
  ExpectClose(a, b, 1e-3f);
}

// gemma3 with six layers: five local (window 5), one global; gpt-oss with four, local and
// global in turn (window 5), YaRN over an original context of 64; deepseek2 (latent attention)
// in V2-Lite's and V3's outline.
INSTANTIATE_TEST_SUITE_P(
    Architectures, TransformerTest,
    testing::Values(ArchitectureCase{.name = "llama", .architecture = "llama"},
                    ArchitectureCase{.name = "qwen2", .architecture = "qwen2"},
                    ArchitectureCase{.name = "qwen3", .architecture = "qwen3", .head_dim = 32},
                    ArchitectureCase{.name = "gemma3", .architecture = "gemma3", .head_dim = 32,
                                     .sliding_window = 5, .n_layer = 6},
                    ArchitectureCase{.name = "mistral_window", .architecture = "llama",
                                     .sliding_window = 7},
                    ArchitectureCase{.name = "qwen3moe", .architecture = "qwen3moe",
                                     .head_dim = 32, .n_expert = 8},
                    ArchitectureCase{.name = "qwen2moe", .architecture = "qwen2moe",
                                     .n_expert = 4, .n_ff_shared = 64},
                    ArchitectureCase{.name = "mixtral", .architecture = "llama", .n_expert = 4},
                    ArchitectureCase{.name = "gpt_oss", .architecture = "gpt-oss", .head_dim = 32,
                                     .sliding_window = 5, .n_layer = 4, .n_expert = 4,
                                     .rope_yarn_factor = 4.0f},
                    ArchitectureCase{.name = "deepseek2", .shape = "tiny-deepseek2"},
                    ArchitectureCase{.name = "deepseek3", .shape = "tiny-deepseek3"}),
    [](const testing::TestParamInfo<ArchitectureCase>& info) { return info.param.name; });

// A backend whose memory is not the host's (a GPU's) gets the same operations in the same order:
// the logits are the same bits, and they come back through one CopyToHost per forward pass (a
// mixture of experts also brings its router's logits to the host, each layer). Latent attention
// (deepseek2) included.
void ExpectTheSameLogitsFromABackendWithMemoryOfItsOwn(const SyntheticModelOptions& options,
                                                       bool only_logits_to_host) {
  absl::StatusOr<Engine> host = MakeEngine(options);
  absl::StatusOr<Engine> own = MakeEngine(options, /*reference=*/false, /*own_memory=*/true);
  ASSERT_TRUE(host.ok() && own.ok());
  const int32_t n_vocab = host->model->config().n_vocab;
  const std::vector<TokenId> a = Tokens(9, 1), b = Tokens(5, 2);
  std::vector<float> host_logits, own_logits;
  for (Engine* e : {&*host, &*own}) {
    BlockTable ta, tb;
    ASSERT_TRUE(e->cache->Reserve(ta, 10).ok() && e->cache->Reserve(tb, 6).ok());
    const SequenceInput prefill[] = {{.tokens = a, .kv = &ta, .all_logits = true},
                                     {.tokens = b, .kv = &tb}};
    std::vector<float>& logits = e == &*host ? host_logits : own_logits;
    ASSERT_TRUE(e->transformer->Prefill(prefill, logits).ok());
    std::vector<float> decoded;
    const TokenId next[] = {7};
    const SequenceInput decode[] = {{.tokens = next, .kv = &ta}};
    ASSERT_TRUE(e->transformer->Decode(decode, decoded).ok());
    logits.insert(logits.end(), decoded.begin(), decoded.end());
  }
  ASSERT_EQ(host_logits.size(), static_cast<size_t>((9 + 1 + 1) * n_vocab));
  EXPECT_TRUE(std::memcmp(host_logits.data(), own_logits.data(),
                          host_logits.size() * sizeof(float)) == 0);
  if (!only_logits_to_host) return;
  const auto& backend = static_cast<const test_support::OwnMemoryBackend&>(*own->backend);
  EXPECT_EQ(backend.bytes_to_host(), host_logits.size() * sizeof(float));
}

TEST(TransformerMemoryTest, ABackendWithMemoryOfItsOwnGivesTheSameLogits) {
  ExpectTheSameLogitsFromABackendWithMemoryOfItsOwn({}, /*only_logits_to_host=*/true);
}

TEST(TransformerMemoryTest, LatentAttentionOnABackendWithMemoryOfItsOwnGivesTheSameLogits) {
  absl::StatusOr<SyntheticModelOptions> options = SyntheticShape("tiny-deepseek3");
  ASSERT_TRUE(options.ok());
  ExpectTheSameLogitsFromABackendWithMemoryOfItsOwn(*options, /*only_logits_to_host=*/false);
}

// Each forward pass is one step for the backend to record (Backend::BeginStep); a step the
// backend refuses to replay (nothing of it ran) is queued again, eagerly, and gives the same
// logits bit for bit; a pass watched layer by layer is never a step.
TEST(TransformerStepTest, ARefusedStepIsQueuedAgainWithTheSameLogits) {
  SyntheticModelOptions options;
  absl::StatusOr<Engine> plain = MakeEngine(options, /*reference=*/false, /*own_memory=*/true);
  absl::StatusOr<Engine> refused = MakeEngine(options, /*reference=*/false, /*own_memory=*/true);
  ASSERT_TRUE(plain.ok() && refused.ok());
  auto& refusing = static_cast<test_support::OwnMemoryBackend&>(*refused->backend);
  const std::vector<TokenId> prompt = Tokens(9, 3);
  std::vector<float> want, got;
  for (Engine* e : {&*plain, &*refused}) {
    BlockTable t;
    ASSERT_TRUE(e->cache->Reserve(t, 11).ok());
    const SequenceInput prefill[] = {{.tokens = prompt, .kv = &t}};
    std::vector<float>& logits = e == &*plain ? want : got;
    ASSERT_TRUE(e->transformer->Prefill(prefill, logits).ok());
    if (e == &*refused) refusing.refuse_steps(1);
    const TokenId next[] = {7};
    const SequenceInput decode[] = {{.tokens = next, .kv = &t}};
    std::vector<float> decoded;
    ASSERT_TRUE(e->transformer->Decode(decode, decoded).ok());
    logits.insert(logits.end(), decoded.begin(), decoded.end());
    EXPECT_EQ(t.n_tokens, 10);
  }
  EXPECT_TRUE(std::memcmp(want.data(), got.data(), want.size() * sizeof(float)) == 0);
  EXPECT_EQ(refusing.steps_begun(), 2);
  EXPECT_GT(refusing.operations_dropped(), 0);

  BlockTable watched;
  ASSERT_TRUE(refused->cache->Reserve(watched, 4).ok());
  const std::vector<TokenId> tokens = Tokens(4, 0);
  SequenceInput in{.tokens = tokens, .kv = &watched};
  std::vector<float> logits;
  ASSERT_TRUE(refused->transformer->Prefill({&in, 1}, logits, [](int32_t) {}).ok());
  EXPECT_EQ(refusing.steps_begun(), 2);
}

// Whether the page holding `p` is mapped into this process (/proc/self/pagemap's present bit).
bool PageMapped(const void* p) {
  const int fd = ::open("/proc/self/pagemap", O_RDONLY);
  if (fd < 0) return true;
  const auto page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  uint64_t entry = 0;
  const off_t at = static_cast<off_t>(reinterpret_cast<uintptr_t>(p) / page * sizeof entry);
  const bool read = ::pread(fd, &entry, sizeof entry, at) == sizeof entry;
  ::close(fd);
  return !read || (entry >> 63) != 0;
}

// A matrix the backend keeps its own copy of is not held twice: its pages in the file are not
// mapped after a forward pass either, which reads the norm vectors lying between the matrices
// (where the page cache holds a large folio, that read maps all of it: the Transformer lets the
// copied matrices' pages go again afterwards) and the embedding rows of the tied output (which
// the backend gives from its copy).
TEST(TransformerMemoryTest, CopiedMatricesPagesStayUnmappedAfterAForward) {
  if (::access("/proc/self/pagemap", R_OK) != 0) {
    GTEST_SKIP() << "/proc/self/pagemap is not readable here: which pages are mapped is unknown";
  }
  SyntheticModelOptions options{.n_embd = 256, .n_head = 4, .n_head_kv = 2, .n_ff = 512,
                                .weight_dtype = kernels::DType::kQ8_0, .tied_output = true};
  absl::StatusOr<Engine> made = MakeEngine(options);
  ASSERT_TRUE(made.ok()) << made.status();
  Engine& e = *made;
  BlockTable table;
  ASSERT_TRUE(e.cache->Reserve(table, 5).ok());
  const std::vector<TokenId> tokens = Tokens(5, 1);
  const SequenceInput in{.tokens = tokens, .kv = &table};
  std::vector<float> logits;
  ASSERT_TRUE(e.transformer->Prefill({&in, 1}, logits).ok());

  const ModelWeights& w = e.model->weights();
  std::vector<const kernels::WeightMatrix*> matrices = {&w.output};
  for (const LayerWeights& l : w.layers) {
    for (const kernels::WeightMatrix* m :
         {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down}) {
      matrices.push_back(m);
    }
  }
  const auto page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  int64_t pages_checked = 0;
  for (const kernels::WeightMatrix* m : matrices) {
    // Asking again says whether the backend keeps a copy; the release undoes the ask.
    if (!e.backend->RegisterWeights(*m)) continue;
    e.backend->ReleaseWeights(*m);
    const auto begin = reinterpret_cast<uintptr_t>(m->data);
    const uintptr_t end = begin + m->n_rows * kernels::RowBytes(m->dtype, m->n_cols);
    for (uintptr_t p = (begin + page - 1) / page * page; p + page <= end; p += page) {
      EXPECT_FALSE(PageMapped(reinterpret_cast<const void*>(p))) << "a page of a copied matrix";
      ++pages_checked;
    }
  }
  EXPECT_GT(pages_checked, 100);
}

// Every weight type a synthetic model can have (rows of 256 and 512, so the K-quants apply): the
// fast kernels' logits stay near the scalar reference's on the same file.
TEST(TransformerWeightTypesTest, EveryWeightTypeAgreesWithTheReference) {
  for (kernels::DType dtype :
       {kernels::DType::kF16, kernels::DType::kBF16, kernels::DType::kQ8_0, kernels::DType::kQ4_0,
        kernels::DType::kQ4_1, kernels::DType::kQ5_0, kernels::DType::kQ5_1,
        kernels::DType::kQ2_K, kernels::DType::kQ3_K, kernels::DType::kQ4_K,
        kernels::DType::kQ5_K, kernels::DType::kQ6_K}) {
    const SyntheticModelOptions options = {
        .seed = 5, .n_embd = 256, .n_ff = 512, .weight_dtype = dtype, .tied_output = false};
    absl::StatusOr<Engine> fast = MakeEngine(options);
    ASSERT_TRUE(fast.ok()) << fast.status();
    absl::StatusOr<Engine> ref = MakeEngine(options, /*reference=*/true);
    ASSERT_TRUE(ref.ok()) << ref.status();
    const std::vector<TokenId> tokens = Tokens(8, 0);
    std::vector<float> a, b;
    BlockTable ta, tb;
    ASSERT_TRUE(fast->cache->Reserve(ta, 8).ok());
    ASSERT_TRUE(ref->cache->Reserve(tb, 8).ok());
    SequenceInput ia{.tokens = tokens, .kv = &ta};
    SequenceInput ib{.tokens = tokens, .kv = &tb};
    ASSERT_TRUE(fast->transformer->Prefill({&ia, 1}, a).ok()) << kernels::DTypeName(dtype);
    ASSERT_TRUE(ref->transformer->Prefill({&ib, 1}, b).ok()) << kernels::DTypeName(dtype);
    double err_sq = 0, ref_sq = 0;
    for (size_t i = 0; i < a.size(); ++i) {
      ASSERT_TRUE(std::isfinite(a[i])) << kernels::DTypeName(dtype) << " at " << i;
      err_sq += (a[i] - b[i]) * static_cast<double>(a[i] - b[i]);
      ref_sq += b[i] * static_cast<double>(b[i]);
    }
    // The fast kernels quantize the activations to 8 bits for quantized weights: measured 1.5-3%
    // relative error in the logits for every quantized type; under 1e-4 for F16, and for BF16
    // where it multiplies in f32 (0.6% where it rounds the activations to BF16); a wrong scale
    // or a misplaced value gives errors of order 1.
    const bool quantized = kernels::Traits(dtype).block_size > 1;
    const bool bf16_products =
        dtype == kernels::DType::kBF16 && kernels::Bf16DotProducts(kernels::DetectCpuIsa());
    EXPECT_LT(std::sqrt(err_sq / ref_sq), quantized ? 0.06 : bf16_products ? 0.02 : 1e-3)
        << kernels::DTypeName(dtype);
  }
}

TEST(TransformerValidationTest, RejectsBadInputWithoutTouchingTheCache) {
  absl::StatusOr<Engine> made = MakeEngine({});
  ASSERT_TRUE(made.ok()) << made.status();
  Engine& e = *made;
  BlockTable t;
  ASSERT_TRUE(e.cache->Reserve(t, 4).ok());
  std::vector<float> logits;
  const std::vector<TokenId> bad_id = {1, 2, 100000};
  SequenceInput in{.tokens = bad_id, .kv = &t};
  absl::Status s = e.transformer->Prefill({&in, 1}, logits);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("100000"), std::string::npos) << s;
  EXPECT_EQ(t.n_tokens, 0);

  const std::vector<TokenId> too_long = Tokens(5, 0);  // 4 tokens of room
  in.tokens = too_long;
  s = e.transformer->Prefill({&in, 1}, logits);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("room"), std::string::npos) << s;

  const std::vector<TokenId> two = Tokens(2, 0);
  in.tokens = two;
  s = e.transformer->Decode({&in, 1}, logits);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(t.n_tokens, 0);
}

TEST(TransformerCallbackTest, ReportsEachLayerInOrder) {
  absl::StatusOr<Engine> made = MakeEngine({.n_layer = 3});
  ASSERT_TRUE(made.ok()) << made.status();
  Engine& e = *made;
  BlockTable t;
  ASSERT_TRUE(e.cache->Reserve(t, 4).ok());
  std::vector<int32_t> layers;
  std::vector<float> logits;
  const std::vector<TokenId> tokens = Tokens(4, 0);
  SequenceInput in{.tokens = tokens, .kv = &t};
  ASSERT_TRUE(
      e.transformer->Prefill({&in, 1}, logits, [&](int32_t l) { layers.push_back(l); }).ok());
  EXPECT_EQ(layers, (std::vector<int32_t>{0, 1, 2}));
}

}  // namespace
}  // namespace baton::engine
