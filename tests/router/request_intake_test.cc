#include "router/request_intake.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "router/request_table.h"
#include "tests/support/test_paths.h"

namespace baton::router {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

class RequestIntakeTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    absl::StatusOr<std::unique_ptr<ServedModel>> m =
        ServedModel::Load(test_support::DefaultModelPath());
    ASSERT_TRUE(m.ok()) << m.status();
    model_ = m->release();
  }
  static void TearDownTestSuite() {
    delete model_;
    model_ = nullptr;
  }
  static const ServedModel& model() { return *model_; }

  static v1::GenerateRequest Prompt(const std::string& text) {
    v1::GenerateRequest r;
    r.set_prompt(text);
    return r;
  }

  static ServedModel* model_;
};

ServedModel* RequestIntakeTest::model_ = nullptr;

TEST_F(RequestIntakeTest, ModelIdentity) {
  EXPECT_EQ(model().id(), "SmolLM2-135M-Instruct.Q4_1");
  EXPECT_GT(model().n_ctx(), 0);
  EXPECT_EQ(model().fingerprint().size(), 32u);
  EXPECT_TRUE(model().prompt_encoder().chat_template().ok());
}

TEST_F(RequestIntakeTest, PromptIsTokenizedAsLlamaCpp) {
  absl::StatusOr<PreparedRequest> p = PrepareRequest(Prompt("Hello, world!"), model(), 7);
  ASSERT_TRUE(p.ok()) << p.status();
  const engine::Tokenizer& tok = model().tokenizer();
  EXPECT_EQ(p->prompt, tok.Encode("Hello, world!", {.add_bos = tok.vocab().add_bos,
                                                     .parse_special = true}));
  // Special-token text is recognized.
  absl::StatusOr<PreparedRequest> special = PrepareRequest(Prompt("<|im_start|>"), model(), 7);
  ASSERT_TRUE(special.ok());
  EXPECT_EQ(special->prompt.size(), tok.vocab().add_bos ? 2u : 1u);
}

TEST_F(RequestIntakeTest, ChatUsesTheModelsTemplate) {
  v1::GenerateRequest r;
  v1::ChatMessage* m = r.mutable_chat()->add_messages();
  m->set_role("user");
  m->set_content("What is 2+2?");
  absl::StatusOr<PreparedRequest> p = PrepareRequest(r, model(), 7);
  ASSERT_TRUE(p.ok()) << p.status();
  const std::string text = model().tokenizer().Decode(p->prompt, /*render_special=*/true);
  EXPECT_THAT(text, AllOf(HasSubstr("<|im_start|>system\n"),
                          HasSubstr("<|im_start|>user\nWhat is 2+2?<|im_end|>\n"),
                          ::testing::EndsWith("<|im_start|>assistant\n")));
}

TEST_F(RequestIntakeTest, PromptTokensAreCheckedAgainstTheVocabulary) {
  v1::GenerateRequest r;
  r.mutable_prompt_tokens()->add_ids(1);
  r.mutable_prompt_tokens()->add_ids(2);
  absl::StatusOr<PreparedRequest> p = PrepareRequest(r, model(), 7);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->prompt, (std::vector<int32_t>{1, 2}));
  r.mutable_prompt_tokens()->add_ids(model().n_vocab());
  p = PrepareRequest(r, model(), 7);
  EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(p.status().message(), HasSubstr("prompt_tokens[2]"));
}

TEST_F(RequestIntakeTest, RejectsBadInput) {
  auto code_and_message = [&](const v1::GenerateRequest& r) {
    absl::Status s = PrepareRequest(r, model(), 7).status();
    return std::make_pair(s.code(), std::string(s.message()));
  };
  EXPECT_EQ(code_and_message(Prompt("")),
            std::make_pair(absl::StatusCode::kInvalidArgument, std::string("prompt is empty")));
  EXPECT_EQ(code_and_message(v1::GenerateRequest()).first, absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(code_and_message(Prompt("bad \xff\xfe bytes")),
            std::make_pair(absl::StatusCode::kInvalidArgument,
                           std::string("prompt is not valid UTF-8")));
  v1::GenerateRequest chat;
  chat.mutable_chat();
  EXPECT_EQ(code_and_message(chat).first, absl::StatusCode::kInvalidArgument);
  // A user turn without content; an empty assistant turn before it is fine.
  v1::ChatMessage* answer = chat.mutable_chat()->add_messages();
  answer->set_role("assistant");
  v1::ChatMessage* empty = chat.mutable_chat()->add_messages();
  empty->set_role("user");
  EXPECT_EQ(code_and_message(chat),
            std::make_pair(absl::StatusCode::kInvalidArgument,
                           std::string("chat message 1 (user) has no content")));
  empty->set_content("Hi");
  EXPECT_TRUE(PrepareRequest(chat, model(), 7).ok());

  v1::GenerateRequest salted = Prompt("Hi");
  salted.set_cache_salt(std::string(256, 's'));
  absl::StatusOr<PreparedRequest> kept = PrepareRequest(salted, model(), 7);
  ASSERT_TRUE(kept.ok()) << kept.status();
  EXPECT_EQ(kept->cache_salt, std::string(256, 's'));
  salted.set_cache_salt(std::string(257, 's'));
  EXPECT_EQ(code_and_message(salted),
            std::make_pair(absl::StatusCode::kInvalidArgument,
                           std::string("cache_salt of 257 bytes exceeds 256")));

  v1::GenerateRequest too_long = Prompt("Hi");
  too_long.mutable_sampling()->set_max_tokens(model().n_ctx());
  auto [code, message] = code_and_message(too_long);
  EXPECT_EQ(code, absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(message, AllOf(HasSubstr("max_tokens (" + std::to_string(model().n_ctx()) + ")"),
                             HasSubstr("context of " + std::to_string(model().n_ctx()))));

  v1::GenerateRequest top_p = Prompt("Hi");
  top_p.mutable_sampling()->set_top_p(1.5f);
  EXPECT_EQ(code_and_message(top_p).first, absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(code_and_message(top_p).second, HasSubstr("top_p"));

  v1::GenerateRequest other_model = Prompt("Hi");
  other_model.set_model("llama-70b");
  EXPECT_EQ(code_and_message(other_model).first, absl::StatusCode::kNotFound);
  other_model.set_model(model().id());
  EXPECT_TRUE(PrepareRequest(other_model, model(), 7).ok());
}

TEST_F(RequestIntakeTest, UnsetSamplingFieldsGetTheirDefaults) {
  absl::StatusOr<PreparedRequest> p = PrepareRequest(Prompt("Hi"), model(), 1234);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->params.top_p, 1.0f);
  EXPECT_EQ(p->params.repetition_penalty, 1.0f);
  EXPECT_EQ(p->params.max_tokens, engine::kDefaultMaxTokens);
  EXPECT_EQ(p->params.seed, 1234u);
  EXPECT_EQ(p->params.temperature, 0.0f);
  // Workers get every value explicitly.
  EXPECT_EQ(p->wire.top_p(), 1.0f);
  EXPECT_EQ(p->wire.repetition_penalty(), 1.0f);
  EXPECT_EQ(p->wire.max_tokens(), engine::kDefaultMaxTokens);
  ASSERT_TRUE(p->wire.has_seed());
  EXPECT_EQ(p->wire.seed(), 1234u);

  v1::GenerateRequest seeded = Prompt("Hi");
  seeded.mutable_sampling()->set_seed(99);
  seeded.mutable_sampling()->add_stop("\n");
  seeded.mutable_sampling()->set_max_tokens(5);
  p = PrepareRequest(seeded, model(), 1234);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->params.seed, 99u);
  EXPECT_EQ(p->params.max_tokens, 5);
  EXPECT_EQ(p->params.stop_strings, std::vector<std::string>{"\n"});
  EXPECT_EQ(p->wire.stop_size(), 0);  // stop strings are the router's business
}

TEST(RequestTableTest, StatesMoveForwardAndQueueIsBounded) {
  RequestTable table(/*max_queued=*/1);
  ASSERT_TRUE(table.Add("a").ok());
  ASSERT_TRUE(table.Add("b").ok());
  EXPECT_EQ(table.Add("a").code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(table.active(), 2);
  EXPECT_TRUE(table.SetState("a", v1::REQUEST_STATE_QUEUED).ok());
  EXPECT_TRUE(table.SetState("a", v1::REQUEST_STATE_QUEUED).ok());  // still queued
  EXPECT_EQ(table.queued(), 1);
  EXPECT_EQ(table.active(), 1);
  absl::Status full = table.SetState("b", v1::REQUEST_STATE_QUEUED);
  EXPECT_EQ(full.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(full.message(), HasSubstr("router queue full"));
  EXPECT_EQ(table.State("b"), v1::REQUEST_STATE_UNSPECIFIED);
  EXPECT_TRUE(table.SetState("a", v1::REQUEST_STATE_PREFILLING).ok());
  EXPECT_EQ(table.queued(), 0);
  EXPECT_TRUE(table.SetState("b", v1::REQUEST_STATE_QUEUED).ok());
  EXPECT_TRUE(table.SetState("a", v1::REQUEST_STATE_DECODING).ok());
  EXPECT_TRUE(table.SetState("a", v1::REQUEST_STATE_FINISHED).ok());
  EXPECT_EQ(table.State("a"), std::nullopt);
  EXPECT_TRUE(table.SetState("b", v1::REQUEST_STATE_FAILED).ok());
  EXPECT_EQ(table.queued(), 0);
  EXPECT_EQ(table.active(), 0);
  EXPECT_EQ(table.finished_total(), 1);
  EXPECT_EQ(table.failed_total(), 1);
  EXPECT_TRUE(table.Add("a").ok());  // ids are reusable once done
}

TEST(RequestTableTest, GoingBackIsAProgrammerError) {
  RequestTable table(4);
  ASSERT_TRUE(table.Add("a").ok());
  ASSERT_TRUE(table.SetState("a", v1::REQUEST_STATE_DECODING).ok());
  EXPECT_DEATH(table.SetState("a", v1::REQUEST_STATE_PREFILLING).IgnoreError(), "cannot go from");
}

}  // namespace
}  // namespace baton::router
