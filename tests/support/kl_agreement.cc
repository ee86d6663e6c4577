#include "tests/support/kl_agreement.h"

#include <cstdint>
#include <iostream>
#include <memory>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "engine/generator.h"
#include "engine/kl_divergence.h"
#include "engine/log_prob_file.h"
#include "engine/model.h"
#include "engine/perplexity.h"
#include "gtest/gtest.h"
#include "tests/support/test_paths.h"

namespace baton::test_support {

absl::StatusOr<engine::KlDivergenceSummary> ScoreKl(const std::string& model_path,
                                                    const std::string& kld_path,
                                                    const engine::LoadOptions& options) {
  using namespace ::baton::engine;
  absl::StatusOr<std::unique_ptr<Model>> model = Model::Load(model_path, options);
  if (!model.ok()) return model.status();
  auto reader = LogProbFileReader::Open(SourcePath(kld_path));
  if (!reader.ok()) return reader.status();
  const LogProbFileHeader& h = (*reader)->header();
  if (h.n_vocab != (*model)->config().n_vocab) {
    return absl::InvalidArgumentError(absl::StrCat(kld_path, ": ", h.n_vocab,
                                                   " tokens, the model's ",
                                                   (*model)->config().n_vocab));
  }
  auto generator = Generator::Create(model->get(), {.n_threads = 2, .max_context = h.n_ctx});
  if (!generator.ok()) return generator.status();
  absl::StatusOr<KlDivergenceSummary> s =
      ScoreKlDivergence(**generator, **reader, ChunkStartToken((*model)->tokenizer().vocab()));
  if (s.ok() && s->count != int64_t{h.n_chunk} * ScoredPositions(h.n_ctx)) {
    return absl::InternalError(absl::StrCat("scored ", s->count, " positions"));
  }
  return s;
}

void ExpectKlAgreement(const std::string& model_path, const std::string& kld_path,
                       double max_mean_kld, double min_same_top, const std::string& label,
                       const engine::LoadOptions& options) {
  absl::StatusOr<engine::KlDivergenceSummary> s = ScoreKl(model_path, kld_path, options);
  ASSERT_TRUE(s.ok()) << s.status() << " [" << model_path << "]";
  EXPECT_LT(s->kld_mean, max_mean_kld) << label;
  EXPECT_GE(s->same_top, min_same_top) << label;
  std::cout << label << ": mean KLD " << s->kld_mean << ", max " << s->kld_max << ", same top "
            << s->same_top << " over " << s->count << " positions\n";
}

}  // namespace baton::test_support
