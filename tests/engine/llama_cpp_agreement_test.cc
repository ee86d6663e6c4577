// The engine against llama.cpp itself on the default model. The expected values were produced by
// scripts/reference/make_engine_fixtures.py (llama-cpp-python) and are committed as data, from
// llama.cpp evaluating one token at a time. The kernels are held to the accuracy contract, not to
// llama.cpp's bits (docs/ACCURACY.md: as accurate against the exact f32 computation as llama.cpp
// is; scripts/reference/README.md explains why anything short of the same bits agrees only to
// about 96%), so the bar is what the exact computation itself reaches.
#include <algorithm>
#include <cmath>
#include <fstream>

#include "engine/generator.h"
#include "engine/model.h"
#include "engine/perplexity.h"
#include "gtest/gtest.h"
#include "kernels/cpu/cpu_isa.h"
#include "nlohmann/json.hpp"
#include "tests/support/test_paths.h"

namespace baton::engine {
namespace {

// How closely the engine must follow llama.cpp. The exact f32 computation (BATON_CPU_ISA=scalar)
// reaches 96.6%, 4 of 10 and 19.6 tokens on these fixtures: llama.cpp's own roundings decide the
// near-ties it differs on. Broken kernels reach none of it.
struct AgreementBar {
  double argmax;       // teacher-forced argmax agreement, at least
  int identical;       // greedy continuations identical for all 32 tokens, at least
  double mean_prefix;  // tokens a greedy continuation shares with llama.cpp's, on average
};
constexpr AgreementBar kBar{.argmax = 0.95, .identical = 3, .mean_prefix = 16.0};

nlohmann::json ReadJson(const std::string& rel) {
  std::ifstream in(test_support::SourcePath(rel));
  EXPECT_TRUE(in) << "missing fixture " << rel;
  return nlohmann::json::parse(in);
}

class LlamaCppAgreementTest : public testing::Test {
 protected:
  static void SetUpTestSuite() {
    absl::StatusOr<std::unique_ptr<Model>> model = Model::Load(test_support::DefaultModelPath());
    ASSERT_TRUE(model.ok()) << model.status() << " (scripts/setup.sh fetches the model)";
    model_ = model->release();
    absl::StatusOr<std::unique_ptr<Generator>> g =
        Generator::Create(model_, {.n_threads = 2, .max_context = 4096});
    ASSERT_TRUE(g.ok()) << g.status();
    generator_ = g->release();
  }
  static void TearDownTestSuite() {
    delete generator_;
    delete model_;
  }
  static Model* model_;
  static Generator* generator_;
};
Model* LlamaCppAgreementTest::model_ = nullptr;
Generator* LlamaCppAgreementTest::generator_ = nullptr;

TEST_F(LlamaCppAgreementTest, TeacherForcedArgmaxAndPerplexity) {
  const nlohmann::json fixture = ReadJson("tests/data/engine/smollm2_teacher_forced.json");
  const std::vector<TokenId> tokens = fixture["tokens"].get<std::vector<TokenId>>();
  const std::vector<TokenId> expected_argmax = fixture["argmax"].get<std::vector<TokenId>>();
  const double expected_ppl = fixture["perplexity"].get<double>();
  const std::vector<double> expected_nll = fixture["nll"].get<std::vector<double>>();
  ASSERT_GE(expected_argmax.size(), 2000u);
  EXPECT_EQ(fixture.value("eval_mode", ""), "token_by_token") << "regenerate the fixtures";

  // Our tokenizer gives llama.cpp's tokens for the text.
  std::ifstream in(test_support::SourcePath(fixture["text_file"].get<std::string>()));
  const std::string text(std::istreambuf_iterator<char>(in), {});
  const Tokenizer& tok = model_->tokenizer();
  EXPECT_EQ(tok.Encode(text, {.add_bos = tok.vocab().add_bos}), tokens);

  absl::StatusOr<PerplexityResult> result =
      ComputePerplexity(*generator_, tokens, static_cast<int32_t>(tokens.size()));
  ASSERT_TRUE(result.ok()) << result.status();
  ASSERT_EQ(result->argmax.size(), expected_argmax.size());
  int agree = 0;
  double nll_diff_sum = 0.0, nll_diff_max = 0.0;
  for (size_t i = 0; i < expected_argmax.size(); ++i) {
    agree += result->argmax[i] == expected_argmax[i];
    const double diff = std::fabs(result->nll[i] - expected_nll[i]);
    nll_diff_sum += diff;
    nll_diff_max = std::max(nll_diff_max, diff);
  }
  const double agreement = static_cast<double>(agree) / expected_argmax.size();
  RecordProperty("argmax_agreement", std::to_string(agreement));
  RecordProperty("perplexity", std::to_string(result->perplexity));
  RecordProperty("nll_diff_mean", std::to_string(nll_diff_sum / expected_argmax.size()));
  std::cout << "argmax agreement " << agree << "/" << expected_argmax.size() << " = " << agreement
            << "; perplexity " << result->perplexity << " vs llama.cpp " << expected_ppl
            << "; per-position NLL difference mean " << nll_diff_sum / expected_argmax.size()
            << ", max " << nll_diff_max << "\n";
  EXPECT_GE(agreement, kBar.argmax) << "on " << kernels::CpuIsaName(kernels::DetectCpuIsa());
  EXPECT_LT(std::fabs(result->perplexity / expected_ppl - 1.0), 0.01);
}

TEST_F(LlamaCppAgreementTest, GreedyGenerationMatches) {
  const nlohmann::json fixture = ReadJson("tests/data/engine/smollm2_greedy.json");
  ASSERT_EQ(fixture.size(), 10u);
  int identical = 0;
  int shared_tokens = 0;
  for (const nlohmann::json& item : fixture) {
    const std::vector<TokenId> prompt = item["prompt_tokens"].get<std::vector<TokenId>>();
    const std::vector<TokenId> expected = item["output_tokens"].get<std::vector<TokenId>>();
    SamplingParams params{.temperature = 0, .max_tokens = 32, .ignore_eos = true};
    absl::StatusOr<GenerationResult> result = generator_->Generate(prompt, params);
    ASSERT_TRUE(result.ok()) << result.status();
    ASSERT_EQ(result->output_tokens.size(), 32u);
    ASSERT_EQ(expected.size(), 32u);
    size_t first = 0;
    while (first < 32 && result->output_tokens[first] == expected[first]) ++first;
    shared_tokens += static_cast<int>(first);
    identical += first == 32;
    if (first < 32) {
      std::cout << "differs from token " << first << ": " << item["prompt"].get<std::string>()
                << "\n";
    }
  }
  const double mean_prefix = shared_tokens / 10.0;
  std::cout << "greedy: " << identical << "/10 prompts identical for 32 tokens; mean common "
            << "prefix " << mean_prefix << " tokens\n";
  EXPECT_GE(identical, kBar.identical);
  EXPECT_GE(mean_prefix, kBar.mean_prefix);
  EXPECT_EQ(generator_->kv_cache().pool().n_free(), generator_->kv_cache().pool().n_blocks());
}

}  // namespace
}  // namespace baton::engine
