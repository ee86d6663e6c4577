// `baton perplexity` with llama.cpp's KL-divergence flags, as a user runs it: write a base with
// the reference kernels, score the reference and the fast kernels against it, and the errors a
// wrong combination or a wrong file gets.
#include <fstream>
#include <string>

#include "engine/synthetic_model.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/integration/local_cluster.h"
#include "tests/support/temp_path.h"
#include "tests/support/test_paths.h"

namespace baton {
namespace {

using testing::HasSubstr;

using test_support::CommandResult;
using test_support::RunBaton;

class PerplexityCliTest : public testing::Test {
 protected:
  void SetUp() override {
    model_ = test_support::TempPath("perplexity-cli.gguf");
    ASSERT_TRUE(engine::WriteSyntheticModel(
                    model_, {.seed = 4, .n_ctx = 64, .weight_dtype = kernels::DType::kQ8_0})
                    .ok());
    text_ = test_support::TempPath("perplexity-cli.txt");
    std::ofstream(text_) << "The quick brown fox jumps over the lazy dog; then the dog sleeps, "
                            "and the fox runs into the woods where nobody can follow it.";
    base_ = test_support::TempPath("perplexity-cli.kld");
  }
  std::string model_, text_, base_;
};

TEST_F(PerplexityCliTest, WritesABaseAndScoresAgainstIt) {
  const CommandResult written =
      RunBaton("perplexity --model " + model_ + " --file " + text_ + " --ctx 16 --chunks 3 " +
               "--threads 1 --reference-kernels --kl-divergence-base " + base_);
  ASSERT_EQ(written.exit_code, 0) << written.output;
  EXPECT_THAT(written.output, HasSubstr("Final estimate: PPL = "));
  EXPECT_THAT(written.output, HasSubstr("21 scored tokens (3 chunks of 16)"));

  const std::string score = "perplexity --model " + model_ + " --threads 1 --kl-divergence " +
                            "--kl-divergence-base " + base_;
  const CommandResult itself = RunBaton(score + " --reference-kernels");
  ASSERT_EQ(itself.exit_code, 0) << itself.output;
  EXPECT_THAT(itself.output, HasSubstr("Same top p: 100.000"));
  EXPECT_THAT(itself.output, HasSubstr("(21 scored positions)"));
  const CommandResult fast = RunBaton(score);
  ASSERT_EQ(fast.exit_code, 0) << fast.output;
  EXPECT_THAT(fast.output, HasSubstr("Mean    KLD:"));
  EXPECT_THAT(fast.output, HasSubstr("Mean PPL(Q)/PPL(base)"));
}

TEST_F(PerplexityCliTest, WrongFlagsAndFilesAreRefusedWithTheReason) {
  const CommandResult both = RunBaton("perplexity --model " + model_ + " --file " + text_ +
                                      " --kl-divergence --kl-divergence-base " + base_);
  EXPECT_EQ(both.exit_code, 2);
  EXPECT_THAT(both.output, HasSubstr("--kl-divergence takes --kl-divergence-base and no --file"));
  const CommandResult not_a_base = RunBaton("perplexity --model " + model_ +
                                            " --kl-divergence --kl-divergence-base " + text_);
  EXPECT_EQ(not_a_base.exit_code, 1);
  EXPECT_THAT(not_a_base.output, HasSubstr("is not a log-probability file"));
  const std::string short_text = test_support::TempPath("short.txt");
  std::ofstream(short_text) << "too short";
  const CommandResult too_short = RunBaton("perplexity --model " + model_ + " --file " +
                                           short_text + " --ctx 64 --kl-divergence-base " + base_);
  EXPECT_EQ(too_short.exit_code, 1);
  EXPECT_THAT(too_short.output, HasSubstr("needs at least one chunk of 64"));
  const CommandResult bad_ctx =
      RunBaton("perplexity --model " + model_ + " --file " + text_ + " --ctx 1");
  EXPECT_EQ(bad_ctx.exit_code, 2);
  EXPECT_THAT(bad_ctx.output, HasSubstr("--ctx"));
}

}  // namespace
}  // namespace baton
