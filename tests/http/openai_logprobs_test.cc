// OpenAI's logprobs objects (router/openai_logprobs.h) from GenerateResponse messages, with the
// default model's tokenizer: both endpoints' shapes, the token pieces and their bytes, the
// stand-in for -inf, completions' text offsets across messages, and the stream's chunks.
#include "router/openai_logprobs.h"

#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/model.h"
#include "gtest/gtest.h"
#include "router/http_openai.h"
#include "tests/support/test_paths.h"

namespace baton::router {
namespace {

using json = nlohmann::ordered_json;

class OpenAiLogprobsTest : public testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<engine::Model>> model =
        engine::Model::Load(test_support::DefaultModelPath());
    ASSERT_TRUE(model.ok()) << model.status();
    model_ = *std::move(model);
    // " Paris" and " is" are single tokens; end-of-sequence is <|im_end|>.
    paris_ = Token(" Paris");
    is_ = Token(" is");
    eos_ = model_->tokenizer().vocab().eos_id;
  }

  const engine::Tokenizer& tokenizer() const { return model_->tokenizer(); }

  engine::TokenId Token(const std::string& text) const {
    const std::vector<engine::TokenId> ids = tokenizer().Encode(text, {});
    EXPECT_EQ(ids.size(), 1u) << text;
    return ids.empty() ? 0 : ids[0];
  }

  // A message of `tokens`, each with log-probability `logprob` and the top tokens `top` (their
  // log-probabilities -1, -2, ...).
  static v1::GenerateResponse Message(const std::vector<engine::TokenId>& tokens, float logprob,
                                      const std::vector<engine::TokenId>& top) {
    v1::GenerateResponse m;
    for (engine::TokenId t : tokens) {
      m.add_tokens(t);
      v1::TokenLogprobs* lp = m.add_logprobs();
      lp->set_logprob(logprob);
      for (size_t i = 0; i < top.size(); ++i) {
        lp->add_top_tokens(top[i]);
        lp->add_top_logprobs(-1.0f - static_cast<float>(i));
      }
    }
    return m;
  }

  std::unique_ptr<engine::Model> model_;
  engine::TokenId paris_ = 0;
  engine::TokenId is_ = 0;
  engine::TokenId eos_ = 0;
};

TEST_F(OpenAiLogprobsTest, ChatEntriesNameEachTokenWithItsBytesAndTopTokens) {
  OpenAiLogprobs logprobs(OpenAiEndpoint::kChatCompletions, &tokenizer());
  json object = logprobs.Empty();
  EXPECT_EQ(object, json({{"content", json::array()}}));
  logprobs.Append(Message({paris_}, -0.25f, {paris_, is_}), object);
  logprobs.Append(Message({eos_}, -std::numeric_limits<float>::infinity(), {}), object);
  ASSERT_EQ(object["content"].size(), 2u);
  const json& first = object["content"][0];
  EXPECT_EQ(first["token"], " Paris");
  EXPECT_EQ(first["logprob"], -0.25);
  EXPECT_EQ(first["bytes"], json({32, 80, 97, 114, 105, 115}));
  ASSERT_EQ(first["top_logprobs"].size(), 2u);
  EXPECT_EQ(first["top_logprobs"][0],
            json({{"token", " Paris"}, {"logprob", -1.0}, {"bytes", {32, 80, 97, 114, 105, 115}}}));
  EXPECT_EQ(first["top_logprobs"][1]["token"], " is");
  EXPECT_EQ(first["top_logprobs"][1]["logprob"], -2.0);
  // Special tokens are named; JSON has no -inf.
  const json& second = object["content"][1];
  EXPECT_EQ(second["token"], "<|im_end|>");
  EXPECT_EQ(second["logprob"], -9999.0);
  EXPECT_EQ(second["top_logprobs"], json::array());
}

TEST_F(OpenAiLogprobsTest, CompletionsListsTokensWithTextOffsetsAcrossMessages) {
  OpenAiLogprobs logprobs(OpenAiEndpoint::kCompletions, &tokenizer());
  json first = logprobs.Empty();
  logprobs.Append(Message({paris_, is_}, -0.5f, {is_}), first);
  EXPECT_EQ(first["tokens"], json({" Paris", " is"}));
  EXPECT_EQ(first["token_logprobs"], json({-0.5, -0.5}));
  // The generated token is always among the top entries (OpenAI's "logprobs + 1").
  EXPECT_EQ(first["top_logprobs"][0], json({{" is", -1.0}, {" Paris", -0.5}}));
  EXPECT_EQ(first["top_logprobs"][1], json({{" is", -0.5}}));
  EXPECT_EQ(first["text_offset"], json({0, 6}));
  // A later message's offsets count on (as in a stream's chunks).
  json second = logprobs.Empty();
  logprobs.Append(Message({paris_}, -0.5f, {}), second);
  EXPECT_EQ(second["text_offset"], json({9}));
}

// Echo: the prompt's entries come first, the first with null log-probabilities (nothing predicts
// it), the rest from the prompt log-probabilities; the generated tokens' offsets count on from
// the echoed text's length. A BOS the tokenizer added takes no room in the text.
TEST_F(OpenAiLogprobsTest, EchoPutsThePromptsEntriesFirst) {
  const std::vector<int32_t> prompt = {is_, paris_};
  const v1::GenerateResponse prompt_message = Message({paris_}, -0.75f, {is_});
  for (const bool added_bos : {false, true}) {
    OpenAiLogprobs logprobs(OpenAiEndpoint::kCompletions, &tokenizer());
    json object = logprobs.Empty();
    std::vector<int32_t> tokens = prompt;
    if (added_bos) tokens.insert(tokens.begin(), eos_);  // any special token stands in for BOS
    v1::GenerateResponse prompt_logprobs;
    if (added_bos) *prompt_logprobs.add_logprobs() = prompt_message.logprobs(0);
    *prompt_logprobs.add_logprobs() = prompt_message.logprobs(0);
    logprobs.AppendPrompt(tokens, prompt_logprobs.logprobs(), added_bos,
                          Utf8Characters(" is Paris"), object);
    logprobs.Append(Message({is_}, -0.5f, {}), object);
    const size_t p = added_bos ? 1 : 0;  // where " is" is
    EXPECT_EQ(object["tokens"][p], " is");
    EXPECT_EQ(object["tokens"][p + 1], " Paris");
    EXPECT_EQ(object["token_logprobs"][0], nullptr);
    EXPECT_EQ(object["top_logprobs"][0], nullptr);
    EXPECT_EQ(object["token_logprobs"][p + 1], -0.75);
    EXPECT_EQ(object["top_logprobs"][p + 1], json({{" is", -1.0}, {" Paris", -0.75}}));
    EXPECT_EQ(object["token_logprobs"].back(), -0.5);
    EXPECT_EQ(object["text_offset"], added_bos ? json({0, 0, 3, 9}) : json({0, 3, 9}))
        << added_bos;
  }
  EXPECT_EQ(Utf8Characters("\xC3\xA9t\xC3\xA9"), 3);  // été
}

TEST_F(OpenAiLogprobsTest, StreamChunksCarryTheirTokensLogprobsEvenWithTextHeldBack) {
  OpenAiStreamEncoder encoder({.endpoint = OpenAiEndpoint::kCompletions, .id = "cmpl-1"},
                              /*include_usage=*/false,
                              OpenAiLogprobs(OpenAiEndpoint::kCompletions, &tokenizer()));
  v1::GenerateResponse held = Message({paris_}, -0.5f, {});  // its text not yet released
  v1::GenerateResponse last = Message({is_}, -1.5f, {});
  last.set_text(" Paris is");
  last.set_finish_reason(v1::FINISH_REASON_LENGTH);
  std::string sse = encoder.Message(held);
  sse += encoder.Message(last);
  std::vector<json> chunks;
  for (size_t pos = 0; pos < sse.size();) {
    const size_t end = sse.find("\n\n", pos);
    chunks.push_back(json::parse(sse.substr(pos + 6, end - pos - 6)));
    pos = end + 2;
  }
  ASSERT_EQ(chunks.size(), 3u);
  EXPECT_EQ(chunks[0]["choices"][0]["text"], "");
  EXPECT_EQ(chunks[0]["choices"][0]["logprobs"]["tokens"], json({" Paris"}));
  EXPECT_EQ(chunks[1]["choices"][0]["text"], " Paris is");
  EXPECT_EQ(chunks[1]["choices"][0]["logprobs"]["tokens"], json({" is"}));
  EXPECT_EQ(chunks[1]["choices"][0]["logprobs"]["text_offset"], json({6}));
  EXPECT_TRUE(chunks[2]["choices"][0]["logprobs"].is_null());
  EXPECT_EQ(chunks[2]["choices"][0]["finish_reason"], "length");
}

TEST_F(OpenAiLogprobsTest, TheWholeAnswerCarriesTheChoicesLogprobs) {
  OpenAiLogprobs logprobs(OpenAiEndpoint::kChatCompletions, &tokenizer());
  json object = logprobs.Empty();
  logprobs.Append(Message({paris_}, -0.5f, {}), object);
  const json answer = OpenAiCompletion({.endpoint = OpenAiEndpoint::kChatCompletions},
                                       " Paris", v1::FINISH_REASON_STOP, {}, object);
  EXPECT_EQ(answer["choices"][0]["logprobs"]["content"][0]["token"], " Paris");
}

}  // namespace
}  // namespace baton::router
