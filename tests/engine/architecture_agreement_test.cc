// Each architecture's forward pass against llama.cpp's own: a tiny random-weight model of each
// (engine/synthetic_model.h, F32 weights, rebuilt here from its seed), whose llama-perplexity
// log-probabilities over the reference text are committed (tests/data/engine/arch_*.kld;
// scripts/reference/make_architecture_klds.sh writes them); and a committed model of every
// i-quant weight type. baton scores the same file's
// positions; a wrong block (a missing post-norm, the wrong activation, RoPE style or window)
// moves the mean KL divergence by orders of magnitude above these bars.
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "engine/model.h"
#include "engine/synthetic_model.h"
#include "gtest/gtest.h"
#include "tests/support/kl_agreement.h"
#include "tests/support/temp_path.h"
#include "tests/support/test_paths.h"

namespace baton::engine {
namespace {

struct Agreement {
  std::string shape;    // SyntheticShape's name
  double max_mean_kld;  // measured values in the instantiation's comment
  double min_same_top;
};

class ArchitectureAgreementTest : public testing::TestWithParam<Agreement> {};

TEST_P(ArchitectureAgreementTest, LogProbabilitiesAgreeWithLlamaCpp) {
  const Agreement& a = GetParam();
  absl::StatusOr<SyntheticModelOptions> options = SyntheticShape(a.shape);
  ASSERT_TRUE(options.ok()) << options.status();
  const std::string path = test_support::TempPath("agreement-" + a.shape + ".gguf");
  ASSERT_TRUE(WriteSyntheticModel(path, *options).ok());
  test_support::ExpectKlAgreement(path, "tests/data/engine/arch_" + a.shape + "_c128.kld",
                                  a.max_mean_kld, a.min_same_top, a.shape);
}

// Every i-quant type and MXFP4 in one model that llama-quantize wrote
// (scripts/reference/make_iquant_model.sh): baton multiplies them in their Q8_0 form
// (kernels/cpu/iquant_blocks.h), llama.cpp in their own. Measured: mean KLD 7.0e-4, same top
// 93.7% (126 positions of a random model's flat distributions). Against the exact product
// (baton's reference kernels: f32 values and activations) baton scores 3.0e-4, llama.cpp 4.2e-4;
// the same model in Q4_0 and Q2_K, which both engines multiply as stored, 1.3e-4 and 2.5e-4
// against llama.cpp.
TEST(IQuantAgreementTest, LogProbabilitiesAgreeWithLlamaCpp) {
  test_support::ExpectKlAgreement(
      test_support::SourcePath("tests/data/engine/iquants_tiny256.gguf"),
      "tests/data/engine/iquants_tiny256_c128.kld", 2e-3, 0.9, "iquants-tiny256");
}

// Measured on the AMX level: mean KLD below 1e-6 (the base file's f16 rounding of each
// log-probability) and the same top token at all 126 positions, for each architecture
// (docs/ARCHITECTURES.md). A wrong block scores orders of magnitude above the bars.
INSTANTIATE_TEST_SUITE_P(
    Architectures, ArchitectureAgreementTest,
    testing::Values(Agreement{"tiny", 1e-4, 0.99}, Agreement{"tiny-qwen3", 1e-4, 0.99},
                    Agreement{"tiny-gemma3", 1e-4, 0.99}, Agreement{"tiny-qwen3moe", 1e-4, 0.99},
                    Agreement{"tiny-qwen2moe", 1e-4, 0.99}, Agreement{"tiny-mixtral", 1e-4, 0.99},
                    Agreement{"tiny-gpt-oss", 1e-4, 0.99}, Agreement{"tiny-deepseek2", 1e-4, 0.99},
                    Agreement{"tiny-deepseek3", 1e-4, 0.99}),
    [](const testing::TestParamInfo<Agreement>& info) {
      std::string name = info.param.shape;
      for (char& c : name) c = c == '-' ? '_' : c;
      return name;
    });

}  // namespace
}  // namespace baton::engine
