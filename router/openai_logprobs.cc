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

// Characters that start in `piece`: its bytes that are not UTF-8 continuation bytes.
int64_t CharactersStarted(const std::string& piece) {
  int64_t n = 0;
  for (const char c : piece) n += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  return n;
}

}  // namespace

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
      AppendCompletionsEntry(message.tokens(i), message.logprobs(i), object);
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

void OpenAiLogprobs::AppendCompletionsEntry(int32_t token, const v1::TokenLogprobs& logprobs,
                                            json& object) {
  const std::string piece = tokenizer_->TokenToPiece(token, /*render_special=*/true);
  object["tokens"].push_back(piece);
  object["token_logprobs"].push_back(JsonLogprob(logprobs.logprob()));
  json top = json::object();
  for (int j = 0; j < logprobs.top_tokens_size(); ++j) {
    top[tokenizer_->TokenToPiece(logprobs.top_tokens(j), true)] =
        JsonLogprob(logprobs.top_logprobs(j));
  }
  top[piece] = JsonLogprob(logprobs.logprob());  // the same value when among the top ones
  object["top_logprobs"].push_back(std::move(top));
  object["text_offset"].push_back(text_offset_);
  text_offset_ += CharactersStarted(piece);
}

}  // namespace baton::router
