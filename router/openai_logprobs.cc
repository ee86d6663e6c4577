#include "router/openai_logprobs.h"

#include <cmath>
#include <string>

namespace baton::router {
namespace {

using json = nlohmann::ordered_json;

// vLLM's stand-in for -inf.
constexpr double kNoProbability = -9999.0;

double JsonLogprob(float logprob) {
  return std::isfinite(logprob) ? static_cast<double>(logprob) : kNoProbability;
}

json Bytes(const std::string& piece) {
  json bytes = json::array();
  for (const char c : piece) bytes.push_back(static_cast<unsigned char>(c));
  return bytes;
}

}  // namespace

int64_t Utf8Characters(const std::string& text) {
  int64_t n = 0;
  for (const char c : text) n += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  return n;
}

EchoedPrompt EchoPrompt(const v1::GenerateRequest& request, std::vector<int32_t> prompt,
                        const engine::Tokenizer& tokenizer) {
  EchoedPrompt echo;
  const bool text_prompt = request.input_case() == v1::GenerateRequest::kPrompt;
  echo.text = text_prompt ? request.prompt() : tokenizer.Decode(prompt, /*render_special=*/true);
  const engine::Vocab& vocab = tokenizer.vocab();
  echo.added_bos = text_prompt && vocab.add_bos && !prompt.empty() && prompt[0] == vocab.bos_id;
  echo.tokens = std::move(prompt);
  return echo;
}

json OpenAiLogprobs::Empty() const {
  if (endpoint_ == OpenAiEndpoint::kChatCompletions) return {{"content", json::array()}};
  return {{"tokens", json::array()},
          {"token_logprobs", json::array()},
          {"top_logprobs", json::array()},
          {"text_offset", json::array()}};
}

void OpenAiLogprobs::Append(const v1::GenerateResponse& message, json& object) {
  for (int i = 0; i < message.tokens_size() && i < message.logprobs_size(); ++i) {
    if (endpoint_ == OpenAiEndpoint::kChatCompletions) {
      object["content"].push_back(ChatEntry(message.tokens(i), message.logprobs(i)));
    } else {
      AppendCompletionsEntry(message.tokens(i), &message.logprobs(i), object);
    }
  }
}

json OpenAiLogprobs::ChatEntry(int32_t token, const v1::TokenLogprobs& logprobs) const {
  auto entry = [&](int32_t id, float logprob) {
    const std::string piece = tokenizer_->TokenToPiece(id, /*render_special=*/true);
    return json{{"token", piece}, {"logprob", JsonLogprob(logprob)}, {"bytes", Bytes(piece)}};
  };
  json out = entry(token, logprobs.logprob());
  json top = json::array();
  for (int j = 0; j < logprobs.top_tokens_size(); ++j) {
    top.push_back(entry(logprobs.top_tokens(j), logprobs.top_logprobs(j)));
  }
  out["top_logprobs"] = std::move(top);
  return out;
}

void OpenAiLogprobs::AppendCompletionsEntry(int32_t token, const v1::TokenLogprobs* logprobs,
                                            json& object) {
  const std::string piece = tokenizer_->TokenToPiece(token, /*render_special=*/true);
  object["tokens"].push_back(piece);
  object["text_offset"].push_back(text_offset_);
  text_offset_ += Utf8Characters(piece);
  if (logprobs == nullptr) {
    object["token_logprobs"].push_back(nullptr);
    object["top_logprobs"].push_back(nullptr);
    return;
  }
  object["token_logprobs"].push_back(JsonLogprob(logprobs->logprob()));
  json top = json::object();
  for (int j = 0; j < logprobs->top_tokens_size(); ++j) {
    top[tokenizer_->TokenToPiece(logprobs->top_tokens(j), true)] =
        JsonLogprob(logprobs->top_logprobs(j));
  }
  top[piece] = JsonLogprob(logprobs->logprob());  // the same value when among the top ones
  object["top_logprobs"].push_back(std::move(top));
}

void OpenAiLogprobs::AppendPrompt(
    const std::vector<int32_t>& tokens,
    const google::protobuf::RepeatedPtrField<v1::TokenLogprobs>& logprobs, bool added_bos,
    int64_t echo_characters, json& object) {
  for (size_t i = 0; i < tokens.size(); ++i) {
    const int64_t offset = text_offset_;
    const int predictor = static_cast<int>(i) - 1;  // the entry of token i, when there is one
    AppendCompletionsEntry(
        tokens[i], predictor >= 0 && predictor < logprobs.size() ? &logprobs[predictor] : nullptr,
        object);
    if (i == 0 && added_bos) text_offset_ = offset;
  }
  text_offset_ = echo_characters;
}

}  // namespace baton::router
