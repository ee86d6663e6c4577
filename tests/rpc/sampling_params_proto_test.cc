// The wire's SamplingParams <-> engine::SamplingParams: unset fields become their defaults, and
// what the engine refuses is refused at the conversion, naming the field.
#include "rpc/sampling_params_proto.h"

#include <string>

#include "absl/status/statusor.h"
#include "gtest/gtest.h"

namespace baton::rpc {
namespace {

constexpr int32_t kVocab = 100;

TEST(SamplingParamsProtoTest, LogprobsUnsetIsOffAndTravelsBothWays) {
  baton::v1::SamplingParams wire;
  absl::StatusOr<engine::SamplingParams> params = SamplingParamsFromProto(wire, kVocab, 1);
  ASSERT_TRUE(params.ok()) << params.status();
  EXPECT_EQ(params->logprobs, -1);
  EXPECT_FALSE(SamplingParamsToProto(*params).has_logprobs());
  for (int32_t k : {0, 5, engine::kMaxLogprobs}) {
    wire.set_logprobs(k);
    params = SamplingParamsFromProto(wire, kVocab, 1);
    ASSERT_TRUE(params.ok()) << params.status();
    EXPECT_EQ(params->logprobs, k);
    const baton::v1::SamplingParams back = SamplingParamsToProto(*params);
    ASSERT_TRUE(back.has_logprobs());
    EXPECT_EQ(back.logprobs(), k);
  }
}

TEST(SamplingParamsProtoTest, LogprobsOutOfRangeAreRefusedByName) {
  baton::v1::SamplingParams wire;
  for (int32_t k : {engine::kMaxLogprobs + 1, -2, 1000000}) {
    wire.set_logprobs(k);
    const absl::StatusOr<engine::SamplingParams> params = SamplingParamsFromProto(wire, kVocab, 1);
    ASSERT_FALSE(params.ok()) << k;
    EXPECT_EQ(params.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(std::string(params.status().message()).find("logprobs"), std::string::npos);
  }
}

TEST(SamplingParamsProtoTest, PromptLogprobsUnsetIsOffAndTravelsBothWays) {
  baton::v1::SamplingParams wire;
  absl::StatusOr<engine::SamplingParams> params = SamplingParamsFromProto(wire, kVocab, 1);
  ASSERT_TRUE(params.ok()) << params.status();
  EXPECT_EQ(params->prompt_logprobs, -1);
  EXPECT_FALSE(SamplingParamsToProto(*params).has_prompt_logprobs());
  for (int32_t k : {0, 3, engine::kMaxLogprobs}) {
    wire.set_prompt_logprobs(k);
    params = SamplingParamsFromProto(wire, kVocab, 1);
    ASSERT_TRUE(params.ok()) << params.status();
    EXPECT_EQ(params->prompt_logprobs, k);
    EXPECT_EQ(params->logprobs, -1);  // the two are independent
    const baton::v1::SamplingParams back = SamplingParamsToProto(*params);
    ASSERT_TRUE(back.has_prompt_logprobs());
    EXPECT_EQ(back.prompt_logprobs(), k);
  }
}

TEST(SamplingParamsProtoTest, SkipSpecialTokensIsTrueUnlessSetFalse) {
  baton::v1::SamplingParams wire;
  absl::StatusOr<engine::SamplingParams> params = SamplingParamsFromProto(wire, kVocab, 1);
  ASSERT_TRUE(params.ok()) << params.status();
  EXPECT_TRUE(params->skip_special_tokens);
  EXPECT_FALSE(SamplingParamsToProto(*params).has_skip_special_tokens());
  wire.set_skip_special_tokens(false);
  params = SamplingParamsFromProto(wire, kVocab, 1);
  ASSERT_TRUE(params.ok()) << params.status();
  EXPECT_FALSE(params->skip_special_tokens);
  const baton::v1::SamplingParams back = SamplingParamsToProto(*params);
  ASSERT_TRUE(back.has_skip_special_tokens());
  EXPECT_FALSE(back.skip_special_tokens());
}

TEST(SamplingParamsProtoTest, PromptLogprobsOutOfRangeAreRefusedByName) {
  baton::v1::SamplingParams wire;
  for (int32_t k : {engine::kMaxLogprobs + 1, -2}) {
    wire.set_prompt_logprobs(k);
    const absl::StatusOr<engine::SamplingParams> params = SamplingParamsFromProto(wire, kVocab, 1);
    ASSERT_FALSE(params.ok()) << k;
    EXPECT_EQ(params.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(std::string(params.status().message()).find("prompt_logprobs"), std::string::npos);
  }
}

TEST(SamplingParamsProtoTest, LogitBiasTravelsBothWaysInTokenOrder) {
  baton::v1::SamplingParams wire;
  (*wire.mutable_logit_bias())[42] = -100.0f;
  (*wire.mutable_logit_bias())[7] = 2.5f;
  absl::StatusOr<engine::SamplingParams> params = SamplingParamsFromProto(wire, kVocab, 1);
  ASSERT_TRUE(params.ok()) << params.status();
  ASSERT_EQ(params->logit_bias.size(), 2u);
  EXPECT_EQ(params->logit_bias[0].token, 7);
  EXPECT_EQ(params->logit_bias[0].bias, 2.5f);
  EXPECT_EQ(params->logit_bias[1].token, 42);
  EXPECT_EQ(params->logit_bias[1].bias, -100.0f);
  const baton::v1::SamplingParams back = SamplingParamsToProto(*params);
  ASSERT_EQ(back.logit_bias_size(), 2);
  EXPECT_EQ(back.logit_bias().at(7), 2.5f);
  EXPECT_EQ(back.logit_bias().at(42), -100.0f);
  (*wire.mutable_logit_bias())[kVocab] = 1.0f;  // outside the vocabulary
  params = SamplingParamsFromProto(wire, kVocab, 1);
  ASSERT_FALSE(params.ok());
  EXPECT_NE(std::string(params.status().message()).find("logit_bias"), std::string::npos);
}

}  // namespace
}  // namespace baton::rpc
