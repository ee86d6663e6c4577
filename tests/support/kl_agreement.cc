#include "tests/support/kl_agreement.h"

#include <cstdint>
#include <iostream>
#include <memory>

#include "absl/status/statusor.h"
#include "engine/generator.h"
#include "engine/kl_divergence.h"
#include "engine/log_prob_file.h"
#include "engine/model.h"
#include "engine/perplexity.h"
#include "gtest/gtest.h"
#include "tests/support/test_paths.h"

namespace baton::test_support {

void ExpectKlAgreement(const std::string& model_path, const std::string& kld_path,
                       double max_mean_kld, double min_same_top, const std::string& label,
                       const engine::LoadOptions& options) {
  using namespace ::baton::engine;
  absl::StatusOr<std::unique_ptr<Model>> model = Model::Load(model_path, options);
  ASSERT_TRUE(model.ok()) << model.status();
  auto reader = LogProbFileReader::Open(SourcePath(kld_path));
  ASSERT_TRUE(reader.ok()) << reader.status();
  ASSERT_EQ((*reader)->header().n_vocab, (*model)->config().n_vocab);
  auto generator =
      Generator::Create(model->get(), {.n_threads = 2, .max_context = (*reader)->header().n_ctx});
  ASSERT_TRUE(generator.ok()) << generator.status();
  absl::StatusOr<KlDivergenceSummary> s =
      ScoreKlDivergence(**generator, **reader, ChunkStartToken((*model)->tokenizer().vocab()));
  ASSERT_TRUE(s.ok()) << s.status();
  const LogProbFileHeader& h = (*reader)->header();
  EXPECT_EQ(s->count, int64_t{h.n_chunk} * ScoredPositions(h.n_ctx));
  EXPECT_LT(s->kld_mean, max_mean_kld) << label;
  EXPECT_GE(s->same_top, min_same_top) << label;
  std::cout << label << ": mean KLD " << s->kld_mean << ", max " << s->kld_max << ", same top "
            << s->same_top << " over " << s->count << " positions\n";
}

}  // namespace baton::test_support
