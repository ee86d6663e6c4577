// Each architecture's Configure (engine/architecture.h), one file each.
#ifndef BATON_ENGINE_ARCHITECTURES_ARCHITECTURES_H_
#define BATON_ENGINE_ARCHITECTURES_ARCHITECTURES_H_

#include "absl/status/status.h"
#include "engine/model_config.h"

namespace baton::engine {

class GgufFile;

namespace architectures {

absl::Status ConfigureLlama(const GgufFile& file, ModelConfig& config);
absl::Status ConfigureQwen2(const GgufFile& file, ModelConfig& config);
absl::Status ConfigureQwen2Moe(const GgufFile& file, ModelConfig& config);
absl::Status ConfigureQwen3(const GgufFile& file, ModelConfig& config);
absl::Status ConfigureQwen3Moe(const GgufFile& file, ModelConfig& config);
absl::Status ConfigureGemma3(const GgufFile& file, ModelConfig& config);
absl::Status ConfigureGptOss(const GgufFile& file, ModelConfig& config);
absl::Status ConfigureDeepseek2(const GgufFile& file, ModelConfig& config);

}  // namespace architectures
}  // namespace baton::engine

#endif  // BATON_ENGINE_ARCHITECTURES_ARCHITECTURES_H_
