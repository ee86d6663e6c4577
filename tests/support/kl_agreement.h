// Scores a model against a KL-divergence base file (llama.cpp's format, engine/log_prob_file.h)
// with gtest expectations: every scored position, mean KL divergence below a bar, same top token
// at least as often as a bar. Prints the figures.
//
// Thread-safety: call from the test's thread.
#ifndef BATON_TESTS_SUPPORT_KL_AGREEMENT_H_
#define BATON_TESTS_SUPPORT_KL_AGREEMENT_H_

#include <string>

#include "absl/status/statusor.h"
#include "engine/kl_divergence.h"
#include "engine/model.h"

namespace baton::test_support {

// The model's scores against the base: every scored position (an error otherwise).
absl::StatusOr<engine::KlDivergenceSummary> ScoreKl(const std::string& model_path,
                                                    const std::string& kld_path,
                                                    const engine::LoadOptions& options = {});

// `model_path`: a GGUF file or checkpoint directory, loaded with `options`; `kld_path`: relative
// to the source tree.
void ExpectKlAgreement(const std::string& model_path, const std::string& kld_path,
                       double max_mean_kld, double min_same_top, const std::string& label,
                       const engine::LoadOptions& options = {});

}  // namespace baton::test_support

#endif  // BATON_TESTS_SUPPORT_KL_AGREEMENT_H_
